"""Per-queue receive rate and in-flight cap, on a real broker process."""

from __future__ import annotations

import time

from broker_process import BrokerProcess

import mq

RATE = 40
SECONDS = 5.0


async def test_a_queue_receive_rate_holds(broker: BrokerProcess) -> None:
    async with mq.QueueClient(broker.bootstrap) as q:
        await q.create_queue("limited-rate", receive_rate=RATE)
        for i in range(1_000):
            await q.send_nowait("limited-rate", b"%d" % i)
        await q.flush()
        got = 0
        started = time.monotonic()
        while time.monotonic() - started < SECONDS:
            messages = await q.receive("limited-rate", max_messages=100, wait=1)
            got += len(messages)
            await q.ack(*messages)
        elapsed = time.monotonic() - started
    # a second's burst, then the rate
    expected = RATE * (elapsed + 1)
    assert 0.8 * expected <= got <= 1.2 * expected, (got, expected)


async def test_a_queue_in_flight_cap_holds(broker: BrokerProcess) -> None:
    async with mq.QueueClient(broker.bootstrap) as q:
        await q.create_queue("limited-flight", max_in_flight=5, visibility_timeout=60)
        for i in range(50):
            await q.send_nowait("limited-flight", b"%d" % i)
        await q.flush()
        first = await q.receive("limited-flight", max_messages=20, wait=5)
        assert len(first) == 5
        assert await q.receive("limited-flight", max_messages=20, wait=0.5) == []
        await q.ack(*first[:2])
        more = await q.receive("limited-flight", max_messages=20, wait=5)
        assert len(more) == 2

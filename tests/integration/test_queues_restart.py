"""A queue's share state survives kill -9 of the broker (SIGKILL, restart on the same data).

Before the crash: some messages are acked, some leased (long and short leases),
some nacked, one rejected to the dead-letter queue. After the restart: no acked
message comes back, every other one does (nothing lost), delivery counts go on
from where they were, receipts taken before the crash still settle while their
lease lasts, short leases still expire at their deadline, and the dead letter
is still in the dead-letter queue. A kill in the middle of receive/ack traffic
loses no answered ack; dedup ids, delays and FIFO order outlive a kill too.
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import time

from mq import QueueClient, QueueMessage
from mq.errors import MQError
from mq.local_cluster import BrokerProcess
from mq.queues import headers as qh

TEST_TIMEOUT_S = 90
TOTAL = 2_000
SHORT_LEASE_S = 8
"""Outlives a restart (~2 s here), so the lease is restored live and ends afterwards."""


def body_of(message: QueueMessage) -> bytes:
    assert message.body is not None
    return message.body


async def take(
    q: QueueClient, queue: str, count: int, visibility_timeout: float | None = None
) -> list[QueueMessage]:
    """Exactly ``count`` messages (bounded wait), leased to ``q``."""
    got: list[QueueMessage] = []
    deadline = time.monotonic() + 15
    while len(got) < count and time.monotonic() < deadline:
        got += await q.receive(
            queue, min(200, count - len(got)), wait=1, visibility_timeout=visibility_timeout
        )
    assert len(got) == count
    return got


async def test_share_state_survives_kill_9(own_broker: BrokerProcess) -> None:
    queue, dlq = "jobs", "jobs-dlq"
    everything = {b"%05d" % i for i in range(TOTAL)}
    async with asyncio.timeout(TEST_TIMEOUT_S):
        # -- before the crash ----------------------------------------------------------
        async with QueueClient(own_broker.bootstrap) as q:
            await q.create_queue(
                queue, partitions=2, visibility_timeout=30, max_deliveries=3, dead_letter_queue=dlq
            )
            futures = [await q.send_nowait(queue, body) for body in sorted(everything)]
            await asyncio.gather(*futures)

            acked = await take(q, queue, TOTAL // 2)
            for i in range(0, len(acked), 100):
                await q.ack(*acked[i : i + 100])
            held_long = await take(q, queue, 300, visibility_timeout=120)
            held_short = await take(q, queue, 200, visibility_timeout=SHORT_LEASE_S)
            nacked = await take(q, queue, 100)
            await q.nack(*nacked)
            [rejected] = await take(q, queue, 1)
            await q.reject(rejected, error="poison")

            async def dead_lettered() -> bool:
                return (await q.describe_queue(queue)).dead_lettered == 1

            deadline = time.monotonic() + 5
            while not await dead_lettered():
                assert time.monotonic() < deadline, "never dead-lettered"
                await asyncio.sleep(0.05)
            before = await q.describe_queue(queue)
            assert before.acked == TOTAL // 2
            assert before.in_flight == 500
            assert before.visible == TOTAL - TOTAL // 2 - 500 - 1

        own_broker.kill()
        await asyncio.to_thread(own_broker.start)  # same data directory, same port

        # -- after the restart ---------------------------------------------------------
        late_acked, late_nacked = held_long[:100], held_long[100:]
        gone = {body_of(m) for m in [*acked, *late_acked, rejected]}
        expected = everything - gone
        counts = {body_of(m): 2 for m in [*late_nacked, *held_short, *nacked]}
        async with QueueClient(own_broker.bootstrap) as q:
            after = await q.describe_queue(queue)
            described_at = time.time()
            assert after.acked == TOTAL // 2
            assert after.dead_lettered == 1
            # the leases are back, with their deadlines (the short ones may have ended)
            short_end = min(m.lease_deadline_ms for m in held_short) / 1000
            assert after.in_flight == 500 or (after.in_flight == 300 and described_at > short_end)

            # receipts from before the crash hold their (unexpired) leases
            for i in range(0, len(late_acked), 50):
                await q.ack(*late_acked[i : i + 50])
            await q.nack(*late_nacked)

            got: dict[bytes, QueueMessage] = {}
            received_at: dict[bytes, float] = {}
            deadline = time.monotonic() + 30
            while set(got) != expected and time.monotonic() < deadline:
                batch = await q.receive(queue, 200, wait=1)
                at = time.time()
                for m in batch:
                    assert body_of(m) not in gone, f"{m.body!r} was acked or dead-lettered"
                    assert body_of(m) not in got, f"{m.body!r} delivered twice"
                    got[body_of(m)] = m
                    received_at[body_of(m)] = at
                if batch:
                    await q.ack(*batch)
            assert set(got) == expected  # nothing lost
            assert len(acked) + len(late_acked) + len(got) + 1 == TOTAL
            for body, m in got.items():
                assert m.delivery_count == counts.get(body, 1), (body, m.delivery_count)
            for m in held_short:  # leased before the crash: not again before its deadline
                assert received_at[body_of(m)] >= m.lease_deadline_ms / 1000 - 0.01
            assert await q.receive(queue, 100, wait=0.5) == []

            final = await q.describe_queue(queue)
            assert final.acked == TOTAL - 1
            assert (final.visible, final.in_flight, final.delayed) == (0, 0, 0)
            assert final.dead_lettered == 1

            letters = await q.receive(dlq, 10, wait=5)
            assert letters, "the dead letter was lost"
            assert {body_of(m) for m in letters} == {body_of(rejected)}  # once or more
            for letter in letters:
                assert qh.header(letter.headers, qh.DLQ_TOPIC) == queue.encode()
                assert qh.header(letter.headers, qh.DLQ_OFFSET) == str(rejected.offset).encode()
                assert qh.header(letter.headers, qh.DLQ_ERROR) == b"poison"


async def test_acks_answered_before_a_kill_9_hold_after_it(own_broker: BrokerProcess) -> None:
    """Consumers receive and ack while the broker is killed and restarted under them: a
    message whose ack was answered is never delivered again; every message is acked in
    the end (those whose ack or receive was cut come back once their lease ends)."""
    queue, total, lease_s = "busy", 3_000, 3
    everything = {b"%05d" % i for i in range(total)}
    confirmed: set[bytes] = set()
    violations: list[bytes] = []
    deliveries: dict[bytes, int] = {}
    half = asyncio.Event()
    cut: list[str] = []
    at_kill: list[int] = []
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with QueueClient(own_broker.bootstrap) as q:
            await q.create_queue(queue, partitions=2, visibility_timeout=lease_s)
            futures = [await q.send_nowait(queue, body) for body in sorted(everything)]
            await asyncio.gather(*futures)

        async def consume() -> None:
            async with QueueClient(own_broker.bootstrap, request_timeout_ms=5_000) as q:
                deadline = time.monotonic() + 40
                while confirmed != everything and time.monotonic() < deadline:
                    try:
                        batch = await q.receive(queue, 50, wait=0.5)
                    except (MQError, OSError) as exc:
                        cut.append(f"receive: {exc!r}")
                        await asyncio.sleep(0.1)  # the broker is down: try again
                        continue
                    for m in batch:
                        body = body_of(m)
                        if body in confirmed:
                            violations.append(body)
                        deliveries[body] = max(deliveries.get(body, 0), m.delivery_count)
                    await asyncio.sleep(0.01)  # "processing"
                    try:
                        await q.ack(*batch)
                    except (MQError, OSError) as exc:  # cut: the outcome is unknown
                        cut.append(f"ack: {exc!r}")
                    else:
                        confirmed.update(body_of(m) for m in batch)
                    if len(confirmed) >= total // 2:
                        half.set()

        async def crash() -> None:
            await asyncio.wait_for(half.wait(), 30)
            at_kill.append(len(confirmed))
            own_broker.kill()
            await asyncio.to_thread(own_broker.start)

        await asyncio.gather(consume(), consume(), crash())
        assert at_kill[0] < total * 3 // 4  # killed in the middle of the traffic
        assert violations == []  # an answered ack is durable
        assert confirmed == everything
        assert max(deliveries.values()) <= 3
        async with QueueClient(own_broker.bootstrap) as q:
            attributes = await q.describe_queue(queue)
            assert attributes.acked == total
            assert (attributes.visible, attributes.in_flight) == (0, 0)
            assert await q.receive(queue, 10, wait=0.5) == []


async def test_dedup_ids_delays_and_fifo_order_survive_kill_9(own_broker: BrokerProcess) -> None:
    delay_s = 8
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with QueueClient(own_broker.bootstrap) as q:
            await q.create_queue("dedup", partitions=2, visibility_timeout=30)
            await q.create_queue("delayed", visibility_timeout=30)
            await q.create_queue("fifo", visibility_timeout=30, fifo=True)
            await q.send("dedup", b"a1", dedup_id="a")
            [first] = await take(q, "dedup", 1)
            await q.ack(first)
            sent_at = time.time()
            await q.send("delayed", b"later", delay=delay_s)
            for i in range(4):
                await q.send("fifo", b"f%d" % i, key=b"K")
            [head] = await take(q, "fifo", 1)
            assert body_of(head) == b"f0"

        own_broker.kill()
        await asyncio.to_thread(own_broker.start)

        async with QueueClient(own_broker.bootstrap) as q:
            early = await q.receive("delayed", 10, wait=0.3)
            assert early == [] or time.time() - sent_at >= delay_s - 0.01
            await q.send("dedup", b"a2", dedup_id="a")  # within the window: dropped
            await q.send("dedup", b"c1", dedup_id="c")
            got = [body_of(m) for m in await take(q, "dedup", 1)]
            got += [body_of(m) for m in await q.receive("dedup", 10, wait=0.5)]
            assert got == [b"c1"]
            assert (await q.describe_queue("dedup")).deduplicated == 1

            assert await q.receive("fifo", 10, wait=0.5) == []  # f0 is still leased
            await q.ack(head)  # with the receipt from before the crash
            order = []
            for _ in range(3):
                batch = await take(q, "fifo", 1)
                assert await q.receive("fifo", 10, wait=0.1) == []  # one at a time
                order += [body_of(m) for m in batch]
                await q.ack(*batch)
            assert order == [b"f1", b"f2", b"f3"]

            [later] = early or await take(q, "delayed", 1)
            assert time.time() - sent_at >= delay_s - 0.01  # the delay outlived the crash
            assert later.delivery_count == 1

"""describe_producers (Kafka's key 61) and a producer whose id and epoch its caller fixes.

What the exactly-once Spark sink stands on (issue 23): an attempt that writes
under the same (id, epoch) as an earlier one learns, per partition, how many
records the earlier one wrote there, and continues after them; the broker's
sequence check refuses any record at a position already written.
"""

from __future__ import annotations

import pytest

from mq.client.producer import Producer
from mq.client.sync import SyncAdmin, SyncConsumer
from mq.client.types import TopicPartition
from mq.errors import InvalidProducerEpochError, OutOfOrderSequenceError

PID = 2**62 + 12345


async def write(
    bootstrap: str, epoch: int, topic: str, values: dict[int, list[bytes]]
) -> dict[int, int]:
    """Resume (id PID, ``epoch``) in ``topic``, send ``values`` per partition; the resume."""
    async with Producer(
        bootstrap, enable_idempotence=True, fixed_identity=(PID, epoch), linger_ms=1
    ) as producer:
        resumed = await producer.resume_sequences(topic)
        futures = [
            await producer.send(topic, value, partition=p)
            for p, vs in values.items()
            for value in vs
        ]
        for future in futures:
            await future
    return resumed


def values_in(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    tp = TopicPartition(topic, partition)
    out: list[bytes] = []
    with SyncConsumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        while len(out) < end:
            for record in consumer.poll(timeout_ms=500).get(tp, []):
                out.append(record.value or b"")
    return out


async def test_a_fixed_identity_resumes_where_it_stopped(bootstrap: str) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("fixed-id", 2)
    first = {0: [b"a%d" % i for i in range(10)], 1: [b"b%d" % i for i in range(4)]}
    assert await write(bootstrap, 3, "fixed-id", first) == {0: 0, 1: 0}
    with SyncAdmin(bootstrap) as admin:
        states = admin.describe_producers(
            [TopicPartition("fixed-id", 0), TopicPartition("fixed-id", 1)], [PID]
        )
    assert {
        tp.partition: [(s["producer_id"], s["producer_epoch"], s["last_sequence"]) for s in st]
        for tp, st in states.items()
    } == {
        0: [(PID, 3, 9)],
        1: [(PID, 3, 3)],
    }
    # where the epoch starts: the sink reads an earlier attempt's records back from there
    assert [s["epoch_start_offset"] for st in states.values() for s in st] == [0, 0]
    # the same (id, epoch) again: it learns what is there and goes on after it
    assert await write(bootstrap, 3, "fixed-id", {0: [b"a10", b"a11"]}) == {0: 10, 1: 4}
    assert values_in(bootstrap, "fixed-id", 0) == [b"a%d" % i for i in range(12)]
    # a later epoch starts its sequences at 0; an earlier one is fenced
    assert await write(bootstrap, 4, "fixed-id", {1: [b"c0"]}) == {0: 0, 1: 0}
    async with Producer(
        bootstrap, enable_idempotence=True, fixed_identity=(PID, 4), linger_ms=1
    ) as producer:
        resumed = await producer.resume("fixed-id")
    assert (resumed[1].written, resumed[1].start_offset) == (1, 4)  # c0, after b0..b3
    assert (resumed[0].written, resumed[0].start_offset) == (0, -1)
    with pytest.raises(InvalidProducerEpochError, match="fenced in fixed-id-1"):
        await write(bootstrap, 3, "fixed-id", {})
    assert values_in(bootstrap, "fixed-id", 1) == [b"b0", b"b1", b"b2", b"b3", b"c0"]


async def test_a_fixed_identity_never_rewrites_a_position(bootstrap: str) -> None:
    """Without resuming, a second attempt starts at sequence 0: the broker refuses it and
    the producer fails the send instead of starting a new epoch (which would duplicate)."""
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("fixed-dup", 1)
    await write(bootstrap, 0, "fixed-dup", {0: [b"x", b"y"]})
    async with Producer(
        bootstrap, enable_idempotence=True, fixed_identity=(PID, 0), linger_ms=1
    ) as producer:
        future = await producer.send("fixed-dup", b"z", partition=0)
        with pytest.raises(OutOfOrderSequenceError):
            await future
    assert values_in(bootstrap, "fixed-dup", 0) == [b"x", b"y"]
    with SyncAdmin(bootstrap) as admin:
        everyone = admin.describe_producers([TopicPartition("fixed-dup", 0)])
    assert [s["producer_id"] for s in everyone[TopicPartition("fixed-dup", 0)]] == [PID]

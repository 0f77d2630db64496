"""``Producer.send_many``: many keyless records a batch at a time, against a real broker."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from client_helpers import admin, consume

from mq import Producer, SyncAdmin, SyncProducer, TopicPartition
from mq.errors import ClientStateError, RecordTooLargeError, UnknownTopicOrPartitionError

TEST_TIMEOUT_S = 30


def values(n: int) -> list[bytes | None]:
    """Distinct values of varied sizes, with a null and an empty one among them."""
    out: list[bytes | None] = [b"%06d" % i + os.urandom(i % 300) for i in range(n)]
    out[7], out[8], out[9] = None, b"", os.urandom(20_000)
    return out


async def test_send_many_keeps_order_between_sends_and_reports_every_offset(
    bootstrap: str,
) -> None:
    topic = "send-many-one"
    sent = values(5_000)
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with admin(bootstrap) as client:
            await client.create_topic(topic, partitions=1)
        async with Producer(bootstrap, acks="all", batch_size=16_384) as producer:
            before = await producer.send(topic, b"before")
            many = await producer.send_many(topic, sent)
            after = await producer.send(topic, b"after")
            assert len(many) == len(sent)
            metas = await many
            assert (await before).offset == 0
            assert (await after).offset == len(sent) + 1
        assert [m.offset for m in metas] == list(range(1, len(sent) + 1))
        assert {(m.topic, m.partition) for m in metas} == {(topic, 0)}
        assert many.done()
        tp = TopicPartition(topic, 0)
        got = (await consume(bootstrap, [tp], len(sent) + 2))[tp]
        assert [r.value for r in got] == [b"before", *sent, b"after"]
        assert all(r.key is None and not r.headers for r in got)
        assert len({r.timestamp for r in got[1:-1]}) == 1  # one timestamp for the call


async def test_send_many_spreads_batches_over_partitions_in_order(bootstrap: str) -> None:
    topic = "send-many-three"
    sent = [b"%06d" % i + b"x" * 90 for i in range(20_000)]
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with admin(bootstrap) as client:
            await client.create_topic(topic, partitions=3)
        async with Producer(bootstrap, acks=1, batch_size=4_096) as producer:
            metas = await (await producer.send_many(topic, sent))
            fixed = await (await producer.send_many(topic, sent[:50], partition=2))
        assert {m.partition for m in metas} == {0, 1, 2}  # a batch's worth to each
        assert {m.partition for m in fixed} == {2}
        tps = [TopicPartition(topic, p) for p in range(3)]
        got = await consume(bootstrap, tps, len(sent) + 50)
        where = {(m.partition, m.offset): value for m, value in zip(metas, sent, strict=True)}
        for tp in tps:
            for record in got[tp]:
                if (tp.partition, record.offset) in where:
                    assert record.value == where[(tp.partition, record.offset)]
        # within each partition the values keep the order they had in the list
        for p in range(3):
            mine = [int(v[:6]) for m, v in zip(metas, sent, strict=True) if m.partition == p]
            assert mine == sorted(mine)
        assert sum(len(records) for records in got.values()) == len(sent) + 50


async def test_send_many_errors(bootstrap: str) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        producer = Producer(bootstrap, max_request_size=10_000, batch_size=4_096)
        with pytest.raises(ClientStateError):
            await producer.send_many("send-many-errors", [b"x"])
        async with producer:
            assert len(await producer.send_many("send-many-errors", [])) == 0
            with pytest.raises(UnknownTopicOrPartitionError):
                await producer.send_many("send-many-errors", [b"x"], partition=9)
            with pytest.raises(RecordTooLargeError):
                await producer.send_many("send-many-errors", [b"ok", b"y" * 20_000])
            await producer.flush()
        tp = TopicPartition("send-many-errors", 0)
        got = (await consume(bootstrap, [tp], 1))[tp]
        assert [r.value for r in got] == [b"ok"]  # what came before the refused record


async def test_send_many_with_an_idempotent_producer(bootstrap: str) -> None:
    topic = "send-many-idempotent"
    sent = [b"%05d" % i for i in range(3_000)]
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Producer(bootstrap, enable_idempotence=True, batch_size=2_048) as producer:
            first = await producer.send_many(topic, sent[:1_000], partition=0)
            await producer.send(topic, b"between", partition=0)
            rest = await producer.send_many(topic, sent[1_000:], partition=0)
            offsets = [m.offset for m in await first + await rest]
        assert offsets == [*range(1_000), *range(1_001, 3_001)]
        tp = TopicPartition(topic, 0)
        got = (await consume(bootstrap, [tp], 3_001))[tp]
        assert [r.value for r in got] == [*sent[:1_000], b"between", *sent[1_000:]]


def test_sync_send_many_takes_the_batched_path_and_keeps_order(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of keyless records go through Producer.send_many; a keyed one goes alone."""
    topic = "send-many-sync"
    calls = {"send": 0, "send_many": 0}
    real_send, real_many = Producer.send, Producer.send_many

    async def send(self: Producer, *args: Any, **kwargs: Any) -> Any:
        calls["send"] += 1
        return await real_send(self, *args, **kwargs)

    async def send_many(self: Producer, *args: Any, **kwargs: Any) -> Any:
        calls["send_many"] += 1
        return await real_many(self, *args, **kwargs)

    monkeypatch.setattr(Producer, "send", send)
    monkeypatch.setattr(Producer, "send_many", send_many)
    records: list[dict[str, Any]] = [
        {"topic": topic, "value": b"%d" % i, "partition": 0} for i in range(1_000)
    ]
    records[500]["key"] = b"keyed"  # sent alone, in its place
    records[600]["headers"] = []  # no headers: still the batched path
    with SyncAdmin(bootstrap) as client:
        client.create_topic(topic, 2)
    with SyncProducer(bootstrap) as producer:
        metas = producer.send_many(records, timeout_s=TEST_TIMEOUT_S)
    assert [(m.partition, m.offset) for m in metas] == [(0, i) for i in range(1_000)]
    assert calls == {"send": 1, "send_many": 2}
    got = asyncio.run(consume(bootstrap, [TopicPartition(topic, 0)], 1_000))
    records_read = got[TopicPartition(topic, 0)]
    assert [r.value for r in records_read] == [b"%d" % i for i in range(1_000)]
    assert records_read[500].key == b"keyed"

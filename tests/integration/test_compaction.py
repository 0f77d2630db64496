"""Log compaction in a real broker: a compacted user topic and ``__consumer_offsets``.

The broker runs with 64 KiB segments (so segments roll after a few hundred
records) and a cleaner that looks every 100 ms. Each test waits, bounded, for
the cleaner to shrink what it should, then checks what is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess

from mq import Admin, Consumer, Producer, TopicPartition

SEGMENT_BYTES = 64 * 1024
TEST_TIMEOUT_S = 60
POLLS, POLL_S = 150, 0.2
"""Waiting for the cleaner: at most 30 s."""


@pytest.fixture
def compacting_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path / "data",
        settings={"cleaner_backoff_ms": 100, "offsets_partitions": 1},
        log_settings={"segment.bytes": SEGMENT_BYTES, "max.message.bytes": 32 * 1024},
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


async def read_from_beginning(bootstrap: str, tp: TopicPartition) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of everything in ``tp`` now."""
    out = []
    async with Consumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out += [(r.offset, r.key or b"", r.value or b"") for r in records]
    return out


def closed_segment_bytes(directory: Path) -> int:
    """Bytes of a partition's closed segments (every .log but the newest)."""
    logs = sorted(directory.glob("*.log"))
    return sum(p.stat().st_size for p in logs[:-1])


async def test_a_compacted_topic_keeps_the_newest_value_of_every_key(
    compacting_broker: BrokerProcess,
) -> None:
    bootstrap = compacting_broker.bootstrap
    tp = TopicPartition("table", 0)
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Admin(bootstrap=bootstrap) as admin:
            await admin.create_topic("table", 1, configs={"cleanup.policy": "compact"})
            described = await admin.describe_configs("table", ["cleanup.policy"])
            assert [(e["name"], e["value"]) for e in described] == [("cleanup.policy", "compact")]
        async with Producer(bootstrap, acks="all", linger_ms=1) as producer:
            futures = [
                await producer.send("table", b"%d;" % i + b"." * 100, key=b"key-%d" % (i % 25))
                for i in range(4_000)
            ]
            futures.append(await producer.send("table", None, key=b"key-3"))  # a tombstone
            await asyncio.gather(*futures)
            # a request with a keyless record fails whole, as in Kafka
            with pytest.raises(Exception, match="without a key"):
                await producer.send_and_wait("table", b"no key")
        for _ in range(POLLS):
            records = await read_from_beginning(bootstrap, tp)
            if len(records) < 1_000:
                break
            await asyncio.sleep(POLL_S)
    assert len(records) < 1_000, "the cleaner did not compact the topic"
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(offsets)
    newest: dict[bytes, bytes] = {}
    for offset, key, value in records:
        assert value == b"" or value.startswith(b"%d;" % offset)  # each record as produced
        newest[key] = value
    assert newest == {
        b"key-%d" % k: b"" if k == 3 else b"%d;" % i + b"." * 100
        for k in range(25)
        for i in [max(i for i in range(4_000) if i % 25 == k)]
    }


async def test_committed_offsets_are_compacted_and_survive_a_restart(
    compacting_broker: BrokerProcess,
) -> None:
    bootstrap = compacting_broker.bootstrap
    tp = TopicPartition("offsets-source", 0)
    offsets_dir = compacting_broker.data_dir / "__consumer_offsets-0"
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Producer(bootstrap) as producer:
            await producer.send_and_wait(tp.topic, b"x")
        async with Consumer(
            bootstrap=bootstrap, group_id="committer", enable_auto_commit=False
        ) as consumer:
            consumer.assign([tp])
            for n in range(1, 3_001):
                await consumer.commit({tp: n})
            # 3,000 commits of ~100 bytes: several segments of 64 KiB, all but the
            # active one closed; compacted, the closed ones keep one commit at most
            offsets_tp = TopicPartition("__consumer_offsets", 0)
            assert (await consumer.end_offsets([offsets_tp]))[offsets_tp] >= 3_000
            for _ in range(POLLS):
                if closed_segment_bytes(offsets_dir) <= 4_096:
                    break
                await asyncio.sleep(POLL_S)
            assert closed_segment_bytes(offsets_dir) <= 4_096, "offsets were not compacted"
            assert await consumer.committed(tp) == 3_000
    await asyncio.to_thread(compacting_broker.restart)
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Consumer(bootstrap=compacting_broker.bootstrap, group_id="committer") as c:
            assert await c.committed(tp) == 3_000

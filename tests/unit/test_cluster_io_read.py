"""``cluster_io.read`` on a local leader whose high watermark lags (a leader just elected
or restarted): it waits, bounded, until it covers the offset asked for, and then fails
with a retriable error; "nothing readable yet" is never "nothing there"."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from mq.broker import cluster_io
from mq.broker.partition import Partition
from mq.errors import CoordinatorLoadInProgressError
from mq.records.batch import iter_batches
from mq.records.records import build_batch
from mq.replication.placement import PartitionState
from mq.storage.log import LogConfig

CONFIG = LogConfig(segment_bytes=64 * 1024, max_message_bytes=32 * 1024)
WITH_FOLLOWER = PartitionState((0, 1), 0, 1, (0, 1))
"""Led here, with an in-sync follower that has not fetched yet: the high watermark waits."""


async def _lagging(tmp_path: Path, records: int) -> Partition:
    partition = Partition.open(tmp_path, "state", 0, CONFIG)
    partition.apply_state(WITH_FOLLOWER, 1)
    partition.start()
    for i in range(records):
        await partition.append(build_batch([(None, b"%d" % i, [], 0)]), acks=1)
    assert (partition.local_end, partition.high_watermark) == (records, 0)
    return partition


async def _offsets(broker: object, end: int, wait_s: float) -> list[int]:
    got = []
    async for chunk in cluster_io.read(broker, "state", 0, 0, end, wait_s):  # type: ignore[arg-type]
        got.extend(h.base_offset for h in iter_batches(chunk))
    return got


async def test_a_read_waits_for_the_high_watermark_to_reach_the_offset_wanted(
    tmp_path: Path,
) -> None:
    partition = await _lagging(tmp_path, 3)
    broker = SimpleNamespace(partitions={("state", 0): partition})
    reading = asyncio.ensure_future(_offsets(broker, 3, 5.0))
    await asyncio.sleep(0.2)
    assert not reading.done()  # nothing below the high watermark yet: not "no data"
    partition.follower_fetched(1, 3)  # the follower's first fetch moves it
    assert await asyncio.wait_for(reading, 5) == [0, 1, 2]
    await partition.close()


async def test_a_read_that_cannot_cover_the_offset_fails_retriably(tmp_path: Path) -> None:
    partition = await _lagging(tmp_path, 2)
    broker = SimpleNamespace(partitions={("state", 0): partition})
    with pytest.raises(CoordinatorLoadInProgressError) as failed:
        await _offsets(broker, 2, 0.2)
    assert failed.value.retriable
    assert await _offsets(broker, 0, 0.2) == []  # without an offset to cover: what is there
    await partition.close()

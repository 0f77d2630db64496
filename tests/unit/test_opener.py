"""The partition opener's worker-thread job (mq.broker.opener, issue 18): a chunk's
partitions are opened in turn by one job per thread, and one that cannot be opened
fails alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mq.broker.opener import OPEN_CHUNK, OPEN_THREADS, OpenedLog, PartitionOpener, _open_logs
from mq.errors import StorageError
from mq.replication.cluster_state import TopicRecord
from mq.storage.config import LogConfig

SMALL = LogConfig().with_overrides({"segment.bytes": 16 << 20})


def test_one_partition_that_cannot_be_opened_fails_alone(tmp_path: Path) -> None:
    topic = TopicRecord("t", "id-1", 3)
    (tmp_path / "t-1").write_text("a file where the partition's directory goes")
    results = _open_logs(tmp_path, [(topic, i, SMALL) for i in range(3)], None)
    assert isinstance(results[0], OpenedLog)
    assert isinstance(results[1], StorageError)
    assert isinstance(results[2], OpenedLog)
    for result in results:
        if isinstance(result, OpenedLog):
            result.log.close()


async def test_every_queued_partition_is_handed_back_once_in_order(tmp_path: Path) -> None:
    count = 3 * OPEN_CHUNK + OPEN_THREADS + 1  # chunks of every shape, a short last one
    topic = TopicRecord("t", "id-1", count)
    (tmp_path / "t-5").write_text("in the way")
    handed: list[tuple[int, OpenedLog | Exception]] = []
    done = asyncio.Event()

    def opened(record: TopicRecord, index: int, result: OpenedLog | Exception) -> None:
        handed.append((index, result))
        if len(handed) == count:
            done.set()

    opener = PartitionOpener(tmp_path, opened, None)
    for index in range(count):
        opener.submit(topic, index, SMALL)
    assert opener.opening("t")
    await asyncio.wait_for(done.wait(), 120)
    assert not opener.opening("t")
    await opener.stop()
    assert [index for index, _ in handed] == list(range(count))
    failed = [index for index, result in handed if not isinstance(result, OpenedLog)]
    assert failed == [5]
    for _, result in handed:
        if isinstance(result, OpenedLog):
            result.log.close()

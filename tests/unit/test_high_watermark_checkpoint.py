"""The high-watermark checkpoint: a partition reopened starts from it (capped by its log
end) instead of its log start; a missing or damaged file only means the log start."""

from __future__ import annotations

from pathlib import Path

import pytest

from mq.broker.partition import Partition
from mq.errors import OffsetNotAvailableError
from mq.records.records import build_batch
from mq.replication.placement import PartitionState
from mq.storage.checkpoint import HW_FILE_NAME, read_high_watermark, write_high_watermark
from mq.storage.fileio import FileIO
from mq.storage.log import LogConfig

CONFIG = LogConfig(segment_bytes=64 * 1024, max_message_bytes=32 * 1024)
ALONE = PartitionState((0,), 0, 1, (0,))


async def _filled(tmp_path: Path, records: int) -> Partition:
    partition = Partition.open(tmp_path, "hw", 0, CONFIG)
    partition.apply_state(ALONE, 1)
    partition.start()
    for i in range(records):
        await partition.append(build_batch([(None, b"%d" % i, [], 0)]), acks=-1)
    return partition


async def test_a_reopened_partition_starts_at_its_checkpointed_high_watermark(
    tmp_path: Path,
) -> None:
    partition = await _filled(tmp_path, 5)
    assert partition.high_watermark == 5
    await partition.close()  # a clean close checkpoints it
    assert read_high_watermark(tmp_path / "hw-0") == 5
    reopened = Partition.open(tmp_path, "hw", 0, CONFIG)
    assert reopened.high_watermark == 5  # before any follower or election
    await reopened.close()


async def test_the_checkpoint_is_capped_by_the_log_end_and_damage_means_the_start(
    tmp_path: Path,
) -> None:
    partition = await _filled(tmp_path, 3)
    await partition.close()
    directory = tmp_path / "hw-0"
    write_high_watermark(directory, FileIO(), 1_000)  # more than the log holds
    reopened = Partition.open(tmp_path, "hw", 0, CONFIG)
    assert reopened.high_watermark == 3
    await reopened.close()
    (directory / HW_FILE_NAME).write_bytes(b"mq-hw-checkpoint 1\nthree\n")
    assert read_high_watermark(directory) is None
    (directory / HW_FILE_NAME).unlink()
    again = Partition.open(tmp_path, "hw", 0, CONFIG)
    assert again.high_watermark == 0
    await again.close()


async def test_the_periodic_checkpoint_writes_only_a_moved_high_watermark(tmp_path: Path) -> None:
    partition = await _filled(tmp_path, 2)
    partition.checkpoint_high_watermark()
    await partition.writer.call(lambda log_: None)  # after the write, in the writer's order
    assert read_high_watermark(tmp_path / "hw-0") == 2
    (tmp_path / "hw-0" / HW_FILE_NAME).unlink()
    partition.checkpoint_high_watermark()  # unmoved: nothing written
    await partition.writer.call(lambda log_: None)
    assert read_high_watermark(tmp_path / "hw-0") is None
    await partition.close()


async def test_a_new_leader_below_its_epoch_start_answers_offset_not_available(
    tmp_path: Path,
) -> None:
    partition = await _filled(tmp_path, 3)
    await partition.close()
    (tmp_path / "hw-0" / HW_FILE_NAME).unlink()  # no checkpoint: it starts at the log start
    reopened = Partition.open(tmp_path, "hw", 0, CONFIG)
    reopened.apply_state(PartitionState((0, 1), 0, 2, (0, 1)), 2)  # a follower to hear from
    reopened.start()
    assert (reopened.high_watermark, reopened.local_end) == (0, 3)
    with pytest.raises(OffsetNotAvailableError) as refused:
        reopened.require_caught_up()  # where the acknowledged data ends is not known yet
    assert refused.value.retriable
    reopened.follower_fetched(1, 3)
    reopened.require_caught_up()
    await reopened.close()

"""A fetch's long poll over several partitions: one future, woken by any, left nowhere."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from mq.broker.context import wait_for_any
from mq.broker.partition import Partition
from mq.records.records import build_batch
from mq.replication.placement import PartitionState
from mq.storage.log import LogConfig

CONFIG = LogConfig(segment_bytes=64 * 1024, max_message_bytes=32 * 1024)


def _leaders(tmp_path: Path, count: int) -> list[Partition]:
    partitions = []
    for index in range(count):
        partition = Partition.open(tmp_path, "poll", index, CONFIG)
        partition.apply_state(PartitionState((0,), 0, 1, (0,)), 1)
        partition.start()
        partitions.append(partition)
    return partitions


def _waiting(partitions: list[Partition]) -> list[int]:
    return [len(p._waiters) for p in partitions]


async def test_an_append_on_any_partition_ends_the_wait_and_unregisters_it(
    tmp_path: Path,
) -> None:
    partitions = _leaders(tmp_path, 3)
    try:
        poll = asyncio.create_task(wait_for_any(partitions, 30.0))
        await asyncio.sleep(0)
        assert _waiting(partitions) == [1, 1, 1]
        await partitions[1].append(build_batch([(None, b"wake", [], 0)]), 1)
        async with asyncio.timeout(10):
            assert await poll is True
        assert _waiting(partitions) == [0, 0, 0]
    finally:
        for partition in partitions:
            await partition.close()


async def test_the_wait_ends_at_its_timeout_and_when_cancelled(tmp_path: Path) -> None:
    partitions = _leaders(tmp_path, 2)
    try:
        started = time.monotonic()
        assert await wait_for_any(partitions, 0.05) is True  # the caller checks its deadline
        assert time.monotonic() - started >= 0.04
        assert _waiting(partitions) == [0, 0]
        poll = asyncio.create_task(wait_for_any(partitions, 30.0))
        await asyncio.sleep(0)
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)
        assert poll.cancelled()
        assert _waiting(partitions) == [0, 0]
    finally:
        for partition in partitions:
            await partition.close()


async def test_closing_a_partition_wakes_the_wait_instead_of_cancelling_it(
    tmp_path: Path,
) -> None:
    # the fetch looks again and answers with the partition's error; a cancelled
    # shared future would have cancelled the fetch itself, which then never answers
    partitions = _leaders(tmp_path, 2)
    poll = asyncio.create_task(wait_for_any(partitions, 30.0))
    await asyncio.sleep(0)
    await partitions[0].close()
    async with asyncio.timeout(10):
        assert await poll is True
    assert _waiting(partitions) == [0, 0]
    await partitions[1].close()


async def test_nothing_led_here_means_no_wait(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path, "follower", 0, CONFIG)
    partition.apply_state(PartitionState((1, 0), 1, 1, (1, 0)), 1)
    partition.start()
    try:
        assert await wait_for_any([partition], 30.0) is False
        assert _waiting([partition]) == [0]
    finally:
        await partition.close()

"""A partition whose log goes offline steps down and tells the broker, once.

A real Log written through a file seam that fails a block reservation with
ENOSPC (no root or tmpfs needed): the failed append takes the log offline;
the partition, leader until then, becomes offline, its pending acks=all
appends fail with a retriable error, its ``on_offline`` handler is told once,
``require_leader`` answers STORAGE_ERROR naming the cause, and a later state
naming it leader or follower does not make it lead or follow again.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest
from storage_helpers import make_batch
from test_log_faults import CONFIG, FaultyIO, fail_nth

from mq.broker.partition import Partition, Role
from mq.errors import MQError, StorageError
from mq.replication.placement import PartitionState
from mq.storage.log import AppendInfo, Log

MAX_APPENDS = 200
"""Bound on the appends before the injected fault hits (the third reservation)."""


async def test_a_failed_append_takes_the_partition_out(tmp_path: Path) -> None:
    io = FaultyIO()
    io.rules.append(fail_nth("allocate", 3, errno.ENOSPC))
    partition = Partition("t", 0, Log.open(tmp_path / "t-0", CONFIG, io=io), node_id=1)
    told: list[Partition] = []
    partition.on_offline = told.append
    partition.start()
    assert partition.apply_state(PartitionState((1, 2, 3), 1, 1, (1, 2, 3)), 1)
    assert partition.is_leader
    # the new leader epoch's file is written in a thread first (and synced: milliseconds
    # on a slow disk, more than the loop turns below); a call queued now waits for it
    await partition.writer.call(lambda _log: None)

    pending: list[asyncio.Future[AppendInfo]] = []
    failure: BaseException | None = None
    for _ in range(MAX_APPENDS):
        try:
            # acks=all with followers that never fetch: stays pending until it fails
            pending.append(partition.append(make_batch(0, 4, value_size=1500), acks=-1))
            await asyncio.sleep(0)
        except MQError as exc:
            failure = exc
            break
        if pending[-1].done() and pending[-1].exception() is not None:
            failure = pending[-1].exception()
            break
    assert failure is not None, "the injected ENOSPC never hit"
    assert isinstance(failure, StorageError), repr(failure)
    for _ in range(10):  # the log tells the partition on the event loop
        await asyncio.sleep(0)

    assert partition.role is Role.OFFLINE
    assert told == [partition]
    assert partition.offline is not None
    for future in pending:  # every acks=all append failed (nothing is left hanging)
        assert future.done()
    with pytest.raises(StorageError, match=r"t-0 is offline on broker 1.*injected ENOSPC"):
        partition.require_leader()
    with pytest.raises(StorageError):
        partition.append(make_batch(0, 1))

    # a newer state naming it leader, then follower, leaves it offline
    assert partition.apply_state(PartitionState((1, 2, 3), 1, 2, (1, 2, 3)), 2)
    assert partition.role is Role.OFFLINE
    assert partition.apply_state(PartitionState((1, 2, 3), 2, 3, (1, 2)), 3)
    assert partition.role is Role.OFFLINE
    assert told == [partition]  # told once
    await partition.close()

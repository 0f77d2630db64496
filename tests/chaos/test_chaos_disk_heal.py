"""The ``disk`` fault's heal: the disk is freed and the broker restarted, whatever happened.

Seed 5080 of a campaign: the fill itself hit ENOSPC where it was not expected,
the nemesis stopped with the filler in place, and the heal only removed the
filler: the broker, whose logs a failed write had taken offline, was never
restarted, so its replicas never came back. Real etcd, one real broker whose
data directory is a small tmpfs. Root only (a tmpfs mount).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from mq.chaos.faults import (
    FILLER,
    DiskFault,
    FaultRecord,
    Nemesis,
    disk_unavailable_reason,
    fill,
    mount_tmpfs,
    unmount,
)
from mq.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

DISK_BYTES = 16 << 20


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    reason = disk_unavailable_reason()
    if reason:
        pytest.skip(reason)
    path = tmp_path / "cluster" / "node-1"
    mount_tmpfs(path, DISK_BYTES)
    try:
        yield path
    finally:
        unmount(path)


def test_fill_of_a_disk_already_full_is_no_error(disk: Path) -> None:
    assert fill(disk / "first") > 0
    assert fill(disk / "second") == 0  # full already: ENOSPC at once, not raised


@pytest.mark.parametrize("broker_dies", [False, True])
def test_heal_frees_the_disk_and_restarts_the_broker(
    disk: Path, tmp_path: Path, broker_dies: bool
) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster",
        1,
        log_settings={"segment.bytes": 1 << 20, "max.message.bytes": 1 << 19},
    )
    cluster.start()
    try:
        broker = cluster.broker(1)
        before = broker.pid
        nemesis = Nemesis(cluster, [], [], DiskFault(1, disk, mounted=True))
        record = FaultRecord(0.0, "disk", 1.0)
        nemesis._disk(random.Random(1), record)  # its undo never runs: the nemesis stopped
        assert (disk / FILLER).exists()
        if broker_dies:
            cluster.kill(1)
        assert nemesis.heal() == []
        assert not (disk / FILLER).exists()
        assert broker.alive
        assert broker.pid != before, "the broker was not restarted on the freed disk"
    finally:
        cluster.stop()

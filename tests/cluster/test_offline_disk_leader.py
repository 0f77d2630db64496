"""A full disk takes a replica's log offline: it gives up leadership and the ISR.

3 real brokers and a real etcd; each broker's data directory is a small tmpfs.
A topic with RF 3 and min.insync.replicas 2. An acks=all producer runs; the
leader's (or a follower's) disk is filled up (a filler file) until its appends
fail with ENOSPC and the log goes offline. The partition must get a new leader
within seconds (not the offline replica, which reports itself out of the ISR
and stops fetching), producing goes on, and every acknowledged record is there.
Then the disk is freed and the broker restarted: its replica recovers, catches
up and rejoins the ISR.

Root only (tmpfs mounts): skipped with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import CLUSTER_SETTINGS, partition_state, wait_until

from mq import Admin, Consumer, Producer, TopicPartition
from mq.chaos.faults import disk_unavailable_reason, mount_tmpfs, unmount
from mq.errors import MQError
from mq.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

TOPIC = "full"
DISK_BYTES = 48 << 20
"""Each broker's tmpfs: the topic's small segments and the internal topics fit."""
SEGMENT_BYTES = 128 * 1024
"""Small segments: rolls (new files, new reserved blocks) come often."""
FILL_CHUNK = 1 << 20
MAX_FILL_CHUNKS = DISK_BYTES // FILL_CHUNK + 16
NEW_LEADER_WITHIN_S = 20.0
"""Bound on the failover: a few session timeouts (2 s here), far more than it takes."""
MAX_SENDS = 20_000
"""Bound on the producer's records while waiting for the leader to fail."""
VALUE = b"x" * 400
LAG_MAX_S = int(CLUSTER_SETTINGS["replica_lag_time_max_ms"]) / 1000
"""The cluster's replica lag bound: a replica wrongly back in the ISR shows within it."""


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[dict[int, Path]]:
    reason = disk_unavailable_reason()
    if reason:
        pytest.skip(reason)
    base = tmp_path / "cluster"
    paths = {node: base / f"node-{node}" for node in (1, 2, 3)}
    mounted = []
    try:
        for path in paths.values():
            mount_tmpfs(path, DISK_BYTES)
            mounted.append(path)
        yield paths
    finally:
        for path in mounted:
            unmount(path)


def _fill(path: Path) -> Path:
    """Fill the tmpfs at ``path`` up (bounded); returns the filler file."""
    filler = path / "filler"
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as f:
        for _ in range(MAX_FILL_CHUNKS):
            try:
                f.write(b"\0" * FILL_CHUNK)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    return filler


async def _produce(
    bootstrap: str, acked: dict[int, bytes], stop: asyncio.Event, count: list[int]
) -> None:
    """acks=all, one record at a time; ``acked``: offset → value of every acknowledged one."""
    async with Producer(
        bootstrap, acks="all", linger_ms=0, delivery_timeout_ms=30_000, request_timeout_ms=5_000
    ) as producer:
        for i in range(MAX_SENDS):
            if stop.is_set():
                return
            value = b"%06d-" % i + VALUE
            try:
                meta = await (await producer.send(TOPIC, value, partition=0))
            except MQError:
                continue  # not acknowledged: not counted
            acked[meta.offset] = value
            count[0] += 1


@pytest.mark.parametrize("victim", ["leader", "follower"])
async def test_a_full_disk_takes_the_replica_out(
    disks: dict[int, Path], tmp_path: Path, victim: str
) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster",
        3,
        settings=CLUSTER_SETTINGS,
        log_settings={"segment.bytes": SEGMENT_BYTES, "max.message.bytes": SEGMENT_BYTES // 2},
    )
    cluster.start()
    try:
        await _run(cluster, disks, victim)
    finally:
        cluster.stop()


async def _run(cluster: LocalCluster, disks: dict[int, Path], victim: str) -> None:
    async with Admin(bootstrap=cluster.bootstrap) as admin:
        await admin.create_topic(
            TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"}
        )

    async def full_isr() -> dict[str, object] | None:
        state = await partition_state(cluster.bootstrap, TOPIC, 0)
        return state if state is not None and len(state["isr"]) == 3 else None

    state = await wait_until(full_isr, what="all three replicas in sync")
    leader = state["leader"]
    full = leader if victim == "leader" else min(set(state["replicas"]) - {leader})

    acked: dict[int, bytes] = {}
    count = [0]
    stop = asyncio.Event()
    producing = asyncio.create_task(_produce(cluster.bootstrap, acked, stop, count))
    try:
        await wait_until(lambda: _true(count[0] >= 200), what="200 acked records")
        filler = _fill(disks[full])
        filled_at = time.monotonic()

        async def out() -> dict[str, object] | None:
            found = await partition_state(cluster.bootstrap, TOPIC, 0)
            if found is None or found["leader"] in (full, -1) or full in found["isr"]:
                return None
            return found

        state = await wait_until(
            out, NEW_LEADER_WITHIN_S, what=f"the {victim}'s replica out after the full disk"
        )
        failover_s = time.monotonic() - filled_at
        # producing goes on at the new leader
        before = count[0]
        await wait_until(lambda: _true(count[0] >= before + 200), what="200 more acked records")
        # the offline replica stays out of the ISR (it is not re-added while offline)
        await asyncio.sleep(2 * LAG_MAX_S)
        state = await partition_state(cluster.bootstrap, TOPIC, 0)
        assert state is not None
        assert full not in state["isr"], state
        assert state["leader"] != full, state
        log_text = cluster.broker(full).log_path.read_text()  # type: ignore[union-attr]
        assert "No space left on device" in log_text
        # it reported itself (not only dropped by its leader for lagging)...
        assert f"node {full} leaves the ISR" in log_text
        # ...and stopped fetching (a fetcher still at it would fail every round)
        assert log_text.count("replica offline") <= 2
    finally:
        stop.set()
        await asyncio.wait_for(producing, 60)
    print(f"{victim} out {failover_s:.2f} s after the fill, {len(acked)} acked")

    # room again, and a restart: the replica recovers, catches up and rejoins the ISR
    filler.unlink()
    await asyncio.to_thread(cluster.restart, full)
    await wait_until(full_isr, 60, what="the restarted replica back in the ISR")

    # every acknowledged record is there, at the offset its ack gave
    end = max(acked) + 1
    seen: dict[int, bytes] = {}
    async with Consumer(bootstrap=cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        deadline = time.monotonic() + 60
        while (not seen or max(seen) + 1 < end) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1_000)
            for records in batch.values():
                for record in records:
                    seen[record.offset] = record.value
    missing = [o for o, v in acked.items() if seen.get(o) != v]
    assert not missing, f"{len(missing)} acked records lost, e.g. offsets {missing[:5]}"


async def _true(value: bool) -> bool:
    return value

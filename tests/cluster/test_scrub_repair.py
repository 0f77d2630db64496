"""Bit rot in a closed segment of one replica, on 3 real brokers and a real etcd.

A byte is flipped in place (as rot would: the broker keeps running) in a
sealed segment of a follower, then of the leader. The scrubber must find it
within one pass, the replica must leave the ISR (and so be unelectable, even
by a preferred-leader election), be repaired from a healthy in-sync replica
and rejoin; at the end every replica holds the same batches, and a consumer
from the beginning reads every record without stalling.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
from cluster_helpers import CLUSTER_SETTINGS, partition_state, replica_batches, wait_until

from mq import Admin, Consumer, Producer, TopicPartition
from mq.errors import MQError, PreferredLeaderNotAvailableError
from mq.local_cluster import LocalCluster
from mq.records.batch import HEADER_SIZE, parse_header
from mq.storage.verify import partition_segments

pytestmark = pytest.mark.slow

TOPIC = "rot"
RECORDS = 3_500
SEGMENT_BYTES = 64 * 1024
SCRUB: dict[str, int | str] = {"scrub_bytes_per_sec": 64 * 1024 * 1024, "scrub_interval_ms": 1_000}
"""A fast scrub: one pass over these few segments takes a moment, one a second."""
LOG_SETTINGS: dict[str, int | str] = {
    "segment.bytes": SEGMENT_BYTES,
    "max.message.bytes": SEGMENT_BYTES // 2,
}
REPAIR_WITHIN_S = 60.0
PASS_LINE = re.compile(r"scrub pass (\d+) done")
TRUNCATED = re.compile(r"truncating (\d+) → (\d+)")


@pytest.fixture(autouse=True)
def _verbose_brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    """INFO logs from the brokers: the scrubber's "scrub pass N done" lines count passes."""
    monkeypatch.setenv("MQ_BROKER_VERBOSE", "1")


def _cluster(tmp_path: Path, **settings: int | str) -> LocalCluster:
    return LocalCluster(
        tmp_path / "cluster",
        3,
        settings={**CLUSTER_SETTINGS, **SCRUB, **settings},
        log_settings=LOG_SETTINGS,
    )


async def _fill(cluster: LocalCluster) -> None:
    async with Admin(bootstrap=cluster.bootstrap) as admin:
        await admin.create_topic(TOPIC, partitions=1, replication_factor=3)
    async with Producer(cluster.bootstrap, acks="all", linger_ms=5, batch_size=4096) as producer:
        for i in range(RECORDS):
            await producer.send(TOPIC, b"value-%06d-" % i + b"x" * 150, partition=0)
        await producer.flush()

    async def settled() -> bool:
        state = await partition_state(cluster.bootstrap, TOPIC, 0)
        return state is not None and set(state["isr"]) == {1, 2, 3}

    await wait_until(settled, what="all three replicas in sync")


def _flip(cluster: LocalCluster, node: int, at_header: int | None) -> Path:
    """Flip one byte in place in the third batch of ``node``'s second segment.

    ``at_header``: a byte of the batch header (outside the CRC for 0..16);
    None: a byte of the records.
    """
    segments = partition_segments(cluster.broker(node).data_dir / f"{TOPIC}-0")
    assert len(segments) >= 4, segments
    path = segments[1]
    with open(path, "r+b") as f:
        data = f.read()
        pos = 0
        for _ in range(2):
            pos += parse_header(data, pos).size
        at = pos + (at_header if at_header is not None else HEADER_SIZE + 7)
        f.seek(at)
        f.write(bytes([data[at] ^ 0x10]))
    return path


def _passes(cluster: LocalCluster, node: int) -> int:
    found = [
        int(m.group(1)) for line in cluster.broker(node).output if (m := PASS_LINE.search(line))
    ]
    return max(found, default=0)


def _found_damage(cluster: LocalCluster, node: int, path: Path) -> int | None:
    """The pass count logged before the scrubber's ERROR line naming ``path``, if any."""
    passes = 0
    for line in cluster.broker(node).output:
        if m := PASS_LINE.search(line):
            passes = int(m.group(1))
        if "ERROR" in line and "scrub:" in line and path.name in line and f"broker {node}" in line:
            return passes
    return None


async def _isr(cluster: LocalCluster, via: str = "") -> tuple[int, set[int]]:
    state = await partition_state(via or cluster.bootstrap, TOPIC, 0)
    assert state is not None
    return state["leader"], set(state["isr"])


async def _read_all(bootstrap: str) -> list[int]:
    """Every record from the beginning; fails if the reader stalls for REPAIR_WITHIN_S."""
    offsets: list[int] = []
    async with Consumer(TOPIC, bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + REPAIR_WITHIN_S
        while len(offsets) < RECORDS:
            assert time.monotonic() < deadline, f"the reader stalled at {len(offsets)} records"
            batches = await consumer.getmany(timeout_ms=500)
            offsets.extend(r.offset for rs in batches.values() for r in rs)
    return offsets


def _identical(cluster: LocalCluster, damaged: Path) -> None:
    logs = [replica_batches(b.data_dir / f"{TOPIC}-0") for b in cluster.brokers.values()]
    assert logs[0]
    assert logs[0] == logs[1] == logs[2]
    copies = {
        (b.data_dir / f"{TOPIC}-0" / damaged.name).read_bytes() for b in cluster.brokers.values()
    }
    assert len(copies) == 1, "the repaired segment file differs from the healthy copies"


async def _until_repaired(cluster: LocalCluster, node: int, path: Path, flipped: float) -> float:
    async def rejoined() -> bool:
        _, isr = await _isr(cluster)
        return _found_damage(cluster, node, path) is not None and node in isr

    async def left() -> bool:
        _, isr = await _isr(cluster)
        return node not in isr or any(
            "repaired offsets" in line for line in cluster.broker(node).output
        )

    await wait_until(left, REPAIR_WITHIN_S, f"node {node} leaving the ISR")
    await wait_until(rejoined, REPAIR_WITHIN_S, f"node {node} repaired and back in the ISR")
    return time.monotonic() - flipped


def test_a_flipped_byte_in_a_follower_is_found_and_repaired_from_the_leader(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    cluster.start()
    try:

        async def scenario() -> None:
            await _fill(cluster)
            leader, _ = await _isr(cluster)
            follower = next(n for n in (1, 2, 3) if n != leader)
            before = _passes(cluster, follower)
            flipped = time.monotonic()
            path = _flip(cluster, follower, None)
            took = await _until_repaired(cluster, follower, path, flipped)
            found_after = _found_damage(cluster, follower, path)
            assert before > 0, "no scrub pass logged before the flip"
            assert found_after is not None
            assert found_after <= before + 1, "not found within one full pass after the flip"
            print(f"follower {follower}: found and repaired in {took:.2f} s")
            print(*(line for line in cluster.broker(follower).output if "repaired" in line))
            offsets = await _read_all(cluster.bootstrap)
            assert offsets == list(range(RECORDS))
            cluster.stop()
            _identical(cluster, path)

        asyncio.run(scenario())
    finally:
        cluster.stop()


def test_a_flipped_byte_in_the_leader_moves_leadership_and_is_repaired(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    cluster.start()
    try:

        async def scenario() -> None:
            await _fill(cluster)
            leader, _ = await _isr(cluster)
            state = await partition_state(cluster.bootstrap, TOPIC, 0)
            assert state is not None
            # the preferred leader: a preferred election would pick it if it were in sync
            assert leader == state["replicas"][0]
            refused = 0
            stop = asyncio.Event()

            async def elect_preferred_all_along() -> None:
                nonlocal refused
                async with Admin(bootstrap=cluster.bootstrap) as admin:
                    while not stop.is_set():
                        try:
                            await admin.elect_leaders([TopicPartition(TOPIC, 0)])
                        except PreferredLeaderNotAvailableError:
                            refused += 1
                        except (MQError, OSError, TimeoutError) as exc:
                            print(f"an election call failed: {exc!r}")  # busy: try again
                        await asyncio.sleep(0.02)

            elections = asyncio.ensure_future(elect_preferred_all_along())
            flipped = time.monotonic()
            path = _flip(cluster, leader, 3)  # a baseOffset byte: outside the CRC
            reader = asyncio.ensure_future(_read_all(cluster.bootstrap))  # may meet the damage
            took = await _until_repaired(cluster, leader, path, flipped)
            stop.set()
            await elections
            print(f"leader {leader}: found, moved and repaired in {took:.2f} s")
            # from its own log: it left the ISR for another leader before the repair, and
            # led again (a preferred election) only once repaired
            lines = [line for line in cluster.broker(leader).output if "rot-0" in line]
            found = next(i for i, line in enumerate(lines) if "scrub:" in line)
            left = next(i for i, line in enumerate(lines) if "leaves the ISR" in line)
            repaired = next(i for i, line in enumerate(lines) if "repaired offsets" in line)
            assert found < left < repaired
            assert f"leader {leader} " not in lines[left]
            assert not any("leading in epoch" in line for line in lines[found:repaired])
            print(f"preferred elections refused while damaged: {refused}")
            offsets = await reader
            assert offsets == list(range(RECORDS))
            assert await _read_all(cluster.bootstrap) == list(range(RECORDS))
            # more data in the new epoch, and scrub passes over it everywhere: no false alarm
            async with Producer(cluster.bootstrap, acks="all", batch_size=4096) as producer:
                for i in range(RECORDS):
                    await producer.send(TOPIC, b"more-%06d-" % i + b"y" * 150, partition=0)
            passes = {n: _passes(cluster, n) for n in cluster.brokers}

            async def scrubbed_twice() -> bool:
                return all(_passes(cluster, n) >= passes[n] + 2 for n in cluster.brokers)

            await wait_until(scrubbed_twice, REPAIR_WITHIN_S, "two more scrub passes")
            alarms = [
                line
                for b in cluster.brokers.values()
                for line in b.output
                if "ERROR" in line and "scrub:" in line
            ]
            assert len(alarms) == 1, alarms  # the one flip
            cluster.stop()
            _identical(cluster, path)

        asyncio.run(scenario())
    finally:
        cluster.stop()


FIELDS = {
    "baseOffset": 7,
    "batchLength": 8,
    "partitionLeaderEpoch": 15,
    "magic": 16,
    "crc": 19,
    "attributes": 22,
    "lastOffsetDelta": 26,
    "recordsCount": 60,
}
"""A byte of each header field of a batch (its offset in the batch)."""


def test_a_flip_in_any_header_field_of_a_follower_is_repaired(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    cluster.start()
    try:

        async def scenario() -> None:
            await _fill(cluster)
            leader, _ = await _isr(cluster)
            follower = next(n for n in (1, 2, 3) if n != leader)
            took = []
            for n, (field, at) in enumerate(FIELDS.items(), start=1):
                flipped = time.monotonic()
                path = _flip(cluster, follower, at)

                async def repaired(count: int = n) -> bool:
                    lines = cluster.broker(follower).output
                    done = sum("repaired offsets" in line for line in lines)
                    _, isr = await _isr(cluster)
                    return done >= count and follower in isr

                await wait_until(repaired, REPAIR_WITHIN_S, f"a flip in {field} repaired")
                took.append(time.monotonic() - flipped)
            print(
                f"follower {follower}: {len(took)} flips, found and repaired in "
                + ", ".join(f"{t:.2f}" for t in took)
                + " s"
            )
            assert await _read_all(cluster.bootstrap) == list(range(RECORDS))
            cluster.stop()
            _identical(cluster, path)

        asyncio.run(scenario())
    finally:
        cluster.stop()


def test_the_same_batch_damaged_in_two_replicas_is_repaired_from_the_third(tmp_path: Path) -> None:
    """The leader and the next replica in ISR order hold the same damaged batch: whichever
    finds it first cannot rewrite it from the other, so it truncates and fetches again
    once the healthy third replica leads."""
    cluster = _cluster(tmp_path)
    cluster.start()
    try:

        async def scenario() -> None:
            await _fill(cluster)
            state = await partition_state(cluster.bootstrap, TOPIC, 0)
            assert state is not None
            leader, second = state["replicas"][:2]
            assert state["leader"] == leader
            reader = asyncio.ensure_future(_read_all(cluster.bootstrap))
            path = _flip(cluster, leader, None)
            _flip(cluster, second, None)

            def repaired(node: int) -> list[str]:
                return [line for line in cluster.broker(node).output if "repaired offsets" in line]

            async def both_repaired() -> bool:
                _, isr = await _isr(cluster)
                return bool(repaired(leader) and repaired(second)) and isr == {1, 2, 3}

            await wait_until(both_repaired, REPAIR_WITHIN_S, "both damaged replicas repaired")
            how = repaired(leader) + repaired(second)
            print(*how, sep="\n")
            assert any("truncated and fetched again" in line for line in how)
            # the healthy replica never lost data to a truncated one (a truncated replica
            # must never lead: it would make the others truncate too)
            healthy = next(n for n in state["replicas"] if n not in (leader, second))
            cut = [m for line in cluster.broker(healthy).output if (m := TRUNCATED.search(line))]
            assert all(int(m.group(2)) >= int(m.group(1)) for m in cut), cut
            assert await reader == list(range(RECORDS))
            cluster.stop()
            _identical(cluster, path)

        asyncio.run(scenario())
    finally:
        cluster.stop()

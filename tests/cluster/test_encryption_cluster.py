"""Encryption at rest in a 3-broker cluster (real etcd): followers store ciphertext.

Every broker gets the same key file. Records produced with acks=all reach the
followers as the leader stored them (encrypted, byte for byte); the leader is
killed, a follower takes over and serves the plaintext, takes new writes, and
its followers store those encrypted too. No file of any broker holds the plaintext.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
import test_scrub_repair as rot
from client_helpers import consume
from cluster_helpers import CLUSTER_SETTINGS, partition_state, replica_batches, wait_until

from mq import Admin, Producer, TopicPartition
from mq.local_cluster import LocalCluster
from mq.records.batch import ENCRYPTED_BIT, parse_header
from mq.storage.keyfile import add_key

pytestmark = pytest.mark.slow

TOPIC = "sealed"
SECRET = b"CLUSTER-SECRET-" + uuid.uuid4().hex[:12].encode()
TEST_TIMEOUT_S = 120


def _all_encrypted(batches: bytes) -> bool:
    pos, count = 0, 0
    while pos < len(batches):
        header = parse_header(batches, pos)
        if not header.attributes & ENCRYPTED_BIT:
            return False
        pos += header.size
        count += 1
    return count > 0


def _files_holding(directory: Path, needle: bytes) -> list[str]:
    return [str(p) for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def _produce(bootstrap: str, values: list[bytes]) -> None:
    async with Producer(bootstrap=bootstrap, acks="all", linger_ms=1) as producer:
        futures = [await producer.send(TOPIC, v, key=b"k-" + SECRET, partition=0) for v in values]
        await asyncio.gather(*futures)


async def test_followers_store_ciphertext_and_a_new_leader_serves_plaintext(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    add_key(keys)
    settings = {**CLUSTER_SETTINGS, "encryption_key_file": str(keys)}
    cluster = LocalCluster(tmp_path / "cluster", 3, settings=settings)
    cluster.start()
    tp = TopicPartition(TOPIC, 0)
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            async with Admin(bootstrap=cluster.bootstrap) as admin:
                await admin.create_topic(
                    TOPIC, 1, replication_factor=3, configs={"min.insync.replicas": "2"}
                )
            first = [SECRET + b"-before-%d" % i for i in range(300)]
            await _produce(cluster.bootstrap, first)
            state = await partition_state(cluster.bootstrap, TOPIC, 0)
            assert state is not None
            old_leader = state["leader"]
            cluster.kill(old_leader)
            survivors = ",".join(b.bootstrap for n, b in cluster.brokers.items() if n != old_leader)

            async def new_leader() -> int | None:
                found = await partition_state(survivors, TOPIC, 0)
                leader = found["leader"] if found else -1
                return leader if leader not in (-1, old_leader) else None

            await wait_until(new_leader, what="a new leader")
            then = [SECRET + b"-after-%d" % i for i in range(200)]
            await _produce(survivors, then)
            got = await consume(survivors, [tp], len(first) + len(then))
            assert [r.value for r in got[tp]] == first + then
            assert {r.key for r in got[tp]} == {b"k-" + SECRET}
    finally:
        await asyncio.to_thread(cluster.stop)
    logs = {
        n: replica_batches(b.data_dir / f"{TOPIC}-0")
        for n, b in cluster.brokers.items()
        if n != old_leader
    }
    a, b = logs.values()
    assert a == b  # the survivors hold the same stored bytes
    assert _all_encrypted(a)
    assert _all_encrypted(replica_batches(cluster.brokers[old_leader].data_dir / f"{TOPIC}-0"))
    assert _files_holding(tmp_path / "cluster", SECRET) == []


async def test_a_damaged_encrypted_follower_is_repaired_without_plaintext(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte flipped in an encrypting follower's sealed segment: the scrubber finds it
    (the CRC covers the stored ciphertext), the follower truncates and fetches the
    leader's encrypted batches again (a rewrite from consumer fetches would store them
    in clear), and rejoins the ISR with the same stored batches as the others."""
    monkeypatch.setenv("MQ_BROKER_VERBOSE", "1")  # the scrubber's pass lines
    keys = tmp_path / "keys.toml"
    add_key(keys)
    cluster = LocalCluster(
        tmp_path / "cluster",
        3,
        settings={**CLUSTER_SETTINGS, **rot.SCRUB, "encryption_key_file": str(keys)},
        log_settings=rot.LOG_SETTINGS,
    )
    cluster.start()
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S * 2):
            await rot._fill(cluster)
            leader, _ = await rot._isr(cluster)
            follower = next(n for n in (1, 2, 3) if n != leader)
            path = rot._flip(cluster, follower, None)
            await rot._until_repaired(cluster, follower, path, time.monotonic())
            assert any(
                "truncating instead of rewriting" in line
                for line in cluster.broker(follower).output
            )
            assert await rot._read_all(cluster.bootstrap) == list(range(rot.RECORDS))
    finally:
        await asyncio.to_thread(cluster.stop)
    logs = [replica_batches(b.data_dir / f"{rot.TOPIC}-0") for b in cluster.brokers.values()]
    assert logs[0] == logs[1] == logs[2]
    assert _all_encrypted(logs[0])
    assert _files_holding(tmp_path / "cluster", b"value-000123-") == []

"""Failover under load: leaders killed with SIGKILL while producers and a consumer group run.

A 3-broker cluster; a topic with RF=3 and min.insync.replicas=2. An
idempotent producer sends 100,000 keyed messages with acks=all while, every
few seconds, the leader of some partition is killed with SIGKILL and started
again. Afterwards every acknowledged message must be at the offset its ack
gave, each partition must hold its keys' messages in send order with no
duplicate, and a consumer group reading all along must have gone on
consuming (and, at the end, have seen every acknowledged message).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time

import pytest
from client_helpers import consume
from cluster_helpers import partition_state, wait_until

from mq import Admin, Consumer, Producer, TopicPartition
from mq.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

TOPIC = "chaos"
PARTITIONS = 3
MESSAGES = 100_000
KILL_EVERY_S = 2.5


async def _chaos(cluster: LocalCluster, stop: asyncio.Event, kills: list[int]) -> None:
    """Every few seconds: SIGKILL the leader of a random partition, then start it again."""
    rng = random.Random(7)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), KILL_EVERY_S)
        if stop.is_set():
            return
        state = await partition_state(cluster.bootstrap, TOPIC, rng.randrange(PARTITIONS))
        victim = state["leader"] if state else -1
        if victim not in cluster.brokers:
            continue
        cluster.kill(victim)
        kills.append(victim)
        await asyncio.sleep(rng.uniform(0.2, 1.5))
        await asyncio.to_thread(cluster.restart, victim)


async def _group_reader(
    bootstrap: str, stop: asyncio.Event, seen: dict[tuple[int, int], bytes], progress: list[float]
) -> None:
    """A consumer group member reading everything, committing as it goes."""
    async with Consumer(
        TOPIC,
        bootstrap=bootstrap,
        group_id="chaos-readers",
        auto_offset_reset="earliest",
        auto_commit_interval_ms=500,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=500,
        request_timeout_ms=5_000,
    ) as consumer:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200, max_records=5_000)
            for tp, records in batches.items():
                for record in records:
                    seen[(tp.partition, record.offset)] = record.value or b""
            if batches:
                progress.append(time.monotonic())


async def test_acks_all_messages_survive_leaders_killed_every_few_seconds(
    cluster: LocalCluster,
) -> None:
    async with Admin(bootstrap=cluster.bootstrap) as admin:
        await admin.create_topic(
            TOPIC, partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"}
        )
    stop_chaos, stop_readers = asyncio.Event(), asyncio.Event()
    kills: list[int] = []
    seen: dict[tuple[int, int], bytes] = {}
    progress: list[float] = []
    chaos = asyncio.create_task(_chaos(cluster, stop_chaos, kills))
    readers = [
        asyncio.create_task(_group_reader(cluster.bootstrap, stop_readers, seen, progress))
        for _ in range(2)
    ]
    acked: dict[int, tuple[int, int]] = {}  # message number → (partition, offset)
    failed = 0
    started = time.monotonic()
    try:
        async with Producer(
            bootstrap=cluster.bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=5_000,
            delivery_timeout_ms=120_000,
        ) as producer:
            futures = []
            for i in range(MESSAGES):  # ~5,000 msg/s: the run spans several kills
                futures.append(
                    await producer.send(TOPIC, key=b"key-%d" % (i % 1_000), value=b"%d" % i)
                )
                if i % 500 == 499:
                    await asyncio.sleep(0.1)
            for i, future in enumerate(futures):
                try:
                    meta = await future
                except Exception:
                    failed += 1
                    continue
                acked[i] = (meta.partition, meta.offset)
    finally:
        stop_chaos.set()
        await chaos
    produce_s = time.monotonic() - started
    assert kills, "no leader was killed: the run was too short to test anything"
    assert failed == 0, f"{failed} sends failed"
    for node in cluster.brokers:
        if not cluster.broker(node).alive:
            await asyncio.to_thread(cluster.restart, node)

    async def all_in_sync() -> bool:
        for index in range(PARTITIONS):
            state = await partition_state(cluster.bootstrap, TOPIC, index)
            if state is None or len(state["isr"]) != 3:
                return False
        return True

    await wait_until(all_in_sync, what="every replica back in sync")

    # every acknowledged message is where its ack said, in send order per partition
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    got = await consume(cluster.bootstrap, tps, len(acked), timeout_s=60)
    by_position = {
        (tp.partition, record.offset): record.value
        for tp, records in got.items()
        for record in records
    }
    for i, position in acked.items():
        assert by_position.get(position) == b"%d" % i, f"message {i} is not at {position}"
    for tp, records in got.items():
        numbers = [int(r.value or b"-1") for r in records]
        assert numbers == sorted(numbers), f"{tp} is out of order"
        assert len(numbers) == len(set(numbers)), f"{tp} has duplicates"
    assert len(by_position) == MESSAGES

    # the group kept consuming through the failures and, given time, saw everything
    await wait_until(
        lambda: _seen_all(seen, acked), timeout_s=60, what="the group reading every message"
    )
    stop_readers.set()
    await asyncio.gather(*readers)
    gaps = [b - a for a, b in itertools.pairwise(progress)]
    assert max(gaps, default=0) < 30, f"the group stalled for {max(gaps):.1f} s"
    print(f"\n{MESSAGES} acks=all messages in {produce_s:.1f} s with {len(kills)} leader kills")


async def _seen_all(seen: dict[tuple[int, int], bytes], acked: dict[int, tuple[int, int]]) -> bool:
    return all(seen.get(position) == b"%d" % i for i, position in acked.items())

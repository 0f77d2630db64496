"""Replication between real broker processes over a real etcd: ISR, acks=all, truncation, failover.

Each test runs its own 3-broker cluster (``LocalCluster``: etcd and three
``mq serve --metadata`` processes on loopback) and breaks it with SIGSTOP and
SIGKILL. Timeouts are short (2 s sessions, 3 s replica lag), so a dead or
frozen broker is noticed within a few seconds; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from client_helpers import consume
from cluster_helpers import (
    metadata,
    partition_state,
    replica_batches,
    wait_until,
)
from mq_cli.main import main

from mq import Admin, Consumer, Producer, TopicPartition
from mq.errors import NotEnoughReplicasError
from mq.local_cluster import LocalCluster

pytestmark = pytest.mark.slow


async def _create(
    cluster: LocalCluster, topic: str, partitions: int = 1, replicas: int = 3, **configs: str
) -> None:
    async with Admin(bootstrap=cluster.bootstrap) as admin:
        await admin.create_topic(
            topic,
            partitions=partitions,
            replication_factor=replicas,
            configs={k.replace("_", "."): v for k, v in configs.items()},
        )


def _others(cluster: LocalCluster, node: int) -> str:
    """The bootstrap list without ``node`` (a frozen broker stalls whoever asks it first)."""
    return ",".join(b.bootstrap for n, b in cluster.brokers.items() if n != node)


async def _isr(cluster: LocalCluster, topic: str, index: int = 0, via: str = "") -> set[int]:
    state = await partition_state(via or cluster.bootstrap, topic, index)
    return set(state["isr"]) if state else set()


async def _leader(cluster: LocalCluster, topic: str, index: int = 0) -> int:
    """The partition's leader, once some broker's view has one."""

    async def known() -> int | None:
        state = await partition_state(cluster.bootstrap, topic, index)
        return state["leader"] if state and state["leader"] >= 0 else None

    found: int = await wait_until(known, what=f"a leader of {topic}-{index}")
    return found


async def _produce(
    bootstrap: str, topic: str, values: list[bytes], acks: int | str = "all"
) -> list[int]:
    """Send in order and return the acknowledged offsets."""
    async with Producer(bootstrap=bootstrap, acks=acks, linger_ms=0) as producer:  # type: ignore[arg-type]
        futures = [await producer.send(topic, value=v, partition=0) for v in values]
        return [(await f).offset for f in futures]


def _replicas_identical(cluster: LocalCluster, topic: str, index: int = 0) -> None:
    logs = [replica_batches(b.data_dir / f"{topic}-{index}") for b in cluster.brokers.values()]
    assert logs[0], "the replicas are empty"
    assert logs[0] == logs[1] == logs[2]


async def test_acks_all_replicates_to_every_replica_byte_for_byte(cluster: LocalCluster) -> None:
    await _create(cluster, "copies", min_insync_replicas="2")
    values = [b"m%d" % i for i in range(2_000)]
    offsets = await _produce(cluster.bootstrap, "copies", values)
    assert offsets == list(range(2_000))
    got = await consume(cluster.bootstrap, [TopicPartition("copies", 0)], 2_000)
    assert [r.value for r in got[TopicPartition("copies", 0)]] == values
    # every follower has everything (acks=all) before the brokers stop
    await asyncio.to_thread(cluster.stop)
    _replicas_identical(cluster, "copies")


async def test_a_frozen_follower_leaves_the_isr_and_rejoins_after_catching_up(
    cluster: LocalCluster,
) -> None:
    await _create(cluster, "frozen", min_insync_replicas="2")
    leader = await _leader(cluster, "frozen")
    follower = next(n for n in cluster.brokers if n != leader)
    cluster.pause(follower)
    try:
        await wait_until(
            lambda: _isr_without(cluster, "frozen", follower), what="the frozen follower leaving"
        )
        # acks=all keeps working with the two replicas left (min.insync.replicas=2)
        offsets = await _produce(
            _others(cluster, follower), "frozen", [b"while-frozen-%d" % i for i in range(500)]
        )
        assert offsets == list(range(500))
    finally:
        cluster.resume(follower)
    await wait_until(
        lambda: _isr_with(cluster, "frozen", follower), what="the follower rejoining the ISR"
    )
    await _produce(cluster.bootstrap, "frozen", [b"after-%d" % i for i in range(100)])
    await asyncio.to_thread(cluster.stop)
    _replicas_identical(cluster, "frozen")


async def _isr_without(cluster: LocalCluster, topic: str, node: int) -> bool:
    isr = await _isr(cluster, topic, via=_others(cluster, node))
    return bool(isr) and node not in isr


async def _isr_with(cluster: LocalCluster, topic: str, node: int) -> bool:
    return node in await _isr(cluster, topic)


async def test_acks_all_is_refused_below_min_insync_replicas(cluster: LocalCluster) -> None:
    await _create(cluster, "strict", min_insync_replicas="3")
    leader = await _leader(cluster, "strict")
    follower = next(n for n in cluster.brokers if n != leader)
    cluster.pause(follower)
    try:
        await wait_until(lambda: _isr_without(cluster, "strict", follower), what="ISR shrink")
        async with Producer(
            bootstrap=cluster.broker(leader).bootstrap, acks="all", linger_ms=0, retries=0
        ) as producer:
            future = await producer.send("strict", value=b"x", partition=0)
            with pytest.raises(NotEnoughReplicasError):
                await future
        # acks=1 does not need the ISR
        assert await _produce(_others(cluster, follower), "strict", [b"one"], acks=1) == [0]
    finally:
        cluster.resume(follower)


async def test_a_former_leader_truncates_writes_nobody_replicated(cluster: LocalCluster) -> None:
    await _create(cluster, "diverge", min_insync_replicas="1")
    base = await _produce(cluster.bootstrap, "diverge", [b"base-%d" % i for i in range(100)])
    assert base == list(range(100))
    old_leader = await _leader(cluster, "diverge")
    followers = [n for n in cluster.brokers if n != old_leader]
    old = cluster.broker(old_leader)
    # freeze the followers: the leader alone takes acks=1 writes they never fetch
    # (the first, sent alone, answers the fetches already waiting: the followers get it)
    for node in followers:
        cluster.pause(node)
    lost = [b"unreplicated-%d" % i for i in range(50)]
    try:
        await _produce(old.bootstrap, "diverge", lost[:1], acks=1)
        await _produce(old.bootstrap, "diverge", lost[1:], acks=1)
    finally:
        cluster.kill(old_leader)
        for node in followers:
            cluster.resume(node)
    new_leader = await wait_until(
        lambda: _new_leader(cluster, "diverge", old_leader), what="a new leader"
    )
    assert new_leader in followers
    kept = [b"new-epoch-%d" % i for i in range(80)]
    await _produce(cluster.bootstrap, "diverge", kept)
    await asyncio.to_thread(cluster.restart, old_leader)
    await wait_until(lambda: _isr_with(cluster, "diverge", old_leader), what="old leader in sync")
    got = await consume(cluster.bootstrap, [TopicPartition("diverge", 0)], 230)
    values = [r.value for r in got[TopicPartition("diverge", 0)]]
    assert values[:100] == [b"base-%d" % i for i in range(100)]
    assert values[-80:] == kept
    assert set(values) & set(lost[1:]) == set()  # only the one a fetch was waiting for may live
    await asyncio.to_thread(cluster.stop)
    _replicas_identical(cluster, "diverge")


async def _new_leader(cluster: LocalCluster, topic: str, old: int) -> int | None:
    leader = await _leader(cluster, topic)
    return leader if leader not in (-1, old) else None


async def test_killing_the_controller_elects_another_and_the_cluster_keeps_serving(
    cluster: LocalCluster,
) -> None:
    await _create(cluster, "before")
    controller = (await metadata(cluster.bootstrap))["controller_id"]
    assert controller in cluster.brokers
    cluster.kill(controller)
    alive = _others(cluster, controller)

    async def other_controller() -> int | None:
        found = (await metadata(alive))["controller_id"]
        return found if found not in (-1, controller) else None

    await wait_until(other_controller, what="a new controller")
    await _create(cluster, "after", replicas=2)
    assert await _produce(alive, "after", [b"a", b"b"]) == [0, 1]
    assert await _produce(alive, "before", [b"c"]) == [0]


async def test_a_clean_shutdown_hands_its_leaderships_over_first(cluster: LocalCluster) -> None:
    await _create(cluster, "handover", partitions=3, min_insync_replicas="2")
    leader = await _leader(cluster, "handover")
    led = [
        i
        for i in range(3)
        if (await partition_state(cluster.bootstrap, "handover", i) or {}).get("leader") == leader
    ]
    await _produce(cluster.bootstrap, "handover", [b"before-%d" % i for i in range(100)])
    await asyncio.to_thread(cluster.broker(leader).stop)  # SIGTERM: a clean shutdown
    others = _others(cluster, leader)
    # no waiting for its session to time out: by the time it has exited, others lead
    for index in led:
        state = await partition_state(others, "handover", index)
        assert state is not None
        assert state["leader"] not in (-1, leader), state
    assert await _produce(others, "handover", [b"after"]) == [100]


async def test_reassigning_a_partition_to_a_new_broker_copies_it_and_moves_leadership(
    cluster: LocalCluster,
) -> None:
    await _create(cluster, "moving", min_insync_replicas="2")
    values = [b"m-%d" % i for i in range(3_000)]
    assert await _produce(cluster.bootstrap, "moving", values) == list(range(3_000))
    state = await partition_state(cluster.bootstrap, "moving", 0)
    assert state is not None
    dropped = state["replicas"][-1]
    new = await asyncio.to_thread(cluster.add_broker)
    new_id = max(cluster.brokers)
    await wait_until(
        lambda: _registered(cluster.bootstrap, new_id), what="the new broker registering"
    )
    target = [new_id, *state["replicas"][:-1]]  # the new broker leads once in sync
    tp = TopicPartition("moving", 0)
    async with Admin(bootstrap=cluster.bootstrap) as admin:
        await admin.reassign_partitions({tp: target})

    async def moved() -> bool:
        found = await partition_state(cluster.bootstrap, "moving", 0)
        return (
            found is not None
            and found["replicas"] == target
            and found["leader"] == new_id
            and sorted(found["isr"]) == sorted(target)
        )

    await wait_until(moved, what="the reassignment completing")
    # writes go on through the move; nothing acknowledged before it is lost
    assert await _produce(cluster.bootstrap, "moving", [b"after"]) == [3_000]
    got = await consume(new.bootstrap, [tp], 3_001)
    assert [r.value for r in got[tp]] == [*values, b"after"]
    removed = cluster.broker(dropped).data_dir / "moving-0"
    await wait_until(lambda: _gone(removed), what="the dropped replica's files going")


async def _registered(bootstrap: str, node: int) -> bool:
    return node in {b["node_id"] for b in (await metadata(bootstrap))["brokers"]}


async def _gone(path: Path) -> bool:
    return not await asyncio.to_thread(path.exists)


async def test_rebalance_spreads_replicas_and_leaders_onto_a_new_broker(
    cluster: LocalCluster,
) -> None:
    await _create(cluster, "spread", partitions=8, replicas=2)
    await _produce(cluster.bootstrap, "spread", [b"x%d" % i for i in range(200)])
    await asyncio.to_thread(cluster.add_broker)
    await wait_until(lambda: _registered(cluster.bootstrap, 4), what="broker 4 registering")
    result = await asyncio.to_thread(
        CliRunner().invoke, main, ["cluster", "rebalance", "--bootstrap", cluster.bootstrap]
    )
    assert result.exit_code == 0, result.output

    async def balanced() -> bool:
        replicas: Counter[int] = Counter()
        leaders: Counter[int] = Counter()
        for index in range(8):
            state = await partition_state(cluster.bootstrap, "spread", index)
            if state is None or sorted(state["isr"]) != sorted(state["replicas"]):
                return False
            replicas.update(state["replicas"])
            leaders[state["leader"]] += 1
        return (
            set(replicas) == {1, 2, 3, 4}
            and max(replicas.values()) == 4
            and (max(leaders.values()) == 2)
        )

    await wait_until(balanced, what="16 replicas and 8 leaders spread over 4 brokers")
    got = await consume(cluster.bootstrap, [TopicPartition("spread", 0)], 200)
    assert [r.value for r in got[TopicPartition("spread", 0)]] == [b"x%d" % i for i in range(200)]


async def test_committed_offsets_survive_their_coordinator_dying(cluster: LocalCluster) -> None:
    await _create(cluster, "tracked")
    await _produce(cluster.bootstrap, "tracked", [b"v%d" % i for i in range(10)])
    tp = TopicPartition("tracked", 0)
    async with Consumer(
        bootstrap=cluster.bootstrap, group_id="survivors", enable_auto_commit=False
    ) as consumer:
        await consumer.commit({tp: 7})
        assert await consumer.committed(tp) == 7
    offsets_partition = zlib.crc32(b"survivors") % 10  # where the group's commits live
    coordinator = await _leader(cluster, "__consumer_offsets", offsets_partition)
    cluster.kill(coordinator)
    others = _others(cluster, coordinator)

    async def committed_elsewhere() -> int | None:
        async with Consumer(
            bootstrap=others, group_id="survivors", request_timeout_ms=3_000
        ) as again:
            return await again.committed(tp)

    assert await wait_until(committed_elsewhere, what="the commit read from a new coordinator") == 7
    assert await _leader(cluster, "__consumer_offsets", offsets_partition) != coordinator

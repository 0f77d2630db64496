"""Queues across a leader failover: share state lives in the replicated ``__share_state``.

A 3-broker cluster (real etcd, real ``mq serve`` processes); the leader of a
queue's partition is SIGKILLed while a consumer holds leases. The new leader
loads the saved state: nothing acknowledged comes back, everything else
does, delivery counts go on, and a lease taken before the kill can still be
acked on the new leader.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from cluster_helpers import partition_state, wait_until

from mq import QueueClient, QueueMessage
from mq.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

MESSAGES = 600


async def _leader(cluster: LocalCluster, topic: str, index: int, via: str = "") -> int:
    async def known() -> int | None:
        state = await partition_state(via or cluster.bootstrap, topic, index)
        return state["leader"] if state and state["leader"] >= 0 else None

    found: int = await wait_until(known, what=f"a leader of {topic}-{index}")
    return found


async def _receive_all(
    q: QueueClient, queue: str, want: int, timeout_s: float
) -> list[QueueMessage]:
    got: list[QueueMessage] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(await q.receive(queue, max_messages=want - len(got), wait=1))
    return got


async def test_share_state_survives_leader_failover(cluster: LocalCluster) -> None:
    queue = "jobs"
    async with QueueClient(cluster.bootstrap) as q:
        await q.create_queue(queue, partitions=1, replication_factor=3, visibility_timeout=6)
        await asyncio.gather(*[q.send(queue, b"m%04d" % i) for i in range(MESSAGES)])

        first = await _receive_all(q, queue, 300, 30)
        assert len(first) == 300
        acked, held = first[:200], first[200:]
        await q.ack(*acked)
        # Nacked once, so it comes back with a higher delivery count.
        nacked = held[:50]
        await q.nack(*nacked)
        held = held[50:]
        renacked = await _receive_all(q, queue, 50, 15)
        assert {m.body for m in renacked} == {m.body for m in nacked}
        assert {m.delivery_count for m in renacked} == {2}
        await q.ack(*renacked)
        acked += renacked
        leader = await _leader(cluster, queue, 0)

    cluster.kill(leader)
    others = ",".join(b.bootstrap for n, b in cluster.brokers.items() if n != leader)
    new_leader = await wait_until(
        lambda: _new_leader(cluster, queue, leader, others), what="a new leader"
    )
    assert new_leader != leader

    async with QueueClient(others) as q:
        # A lease taken before the kill still holds on the new leader: ack with it.
        await q.ack(*held[:20])
        acked += held[:20]
        rest = await _receive_all(q, queue, MESSAGES - len(acked), 60)
        await q.ack(*rest)
        bodies = [m.body for m in acked] + [m.body for m in rest]
        assert sorted(bodies) == sorted(b"m%04d" % i for i in range(MESSAGES))
        assert not {m.body for m in acked} & {m.body for m in rest}, "an ack was lost"
        leased_before = {m.body for m in held[20:]}
        again = [m for m in rest if m.body in leased_before]
        assert len(again) == len(leased_before)
        assert {m.delivery_count for m in again} == {2}
        attributes = await q.describe_queue(queue)
        assert (attributes.acked, attributes.in_flight, attributes.visible) == (MESSAGES, 0, 0)


async def _new_leader(cluster: LocalCluster, queue: str, old: int, via: str) -> int | None:
    state = await partition_state(via, queue, 0)
    if state and state["leader"] >= 0 and state["leader"] != old:
        return int(state["leader"])
    return None

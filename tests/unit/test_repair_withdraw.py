"""mq.broker.repair.withdraw over an in-memory metadata store: a damaged replica leaves
the ISR, hands leadership to a live in-sync replica first, and stays when no one can
take over."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mq.broker.repair import withdraw
from mq.replication import cluster_state
from mq.replication.cluster_state import partition_key, read_partition
from mq.replication.local_store import LocalStore
from mq.replication.placement import PartitionState
from mq.replication.store import Put


async def _store(state: PartitionState) -> LocalStore:
    store = LocalStore()
    await store.start()
    packed = cluster_state._pack_state(state)
    assert await store.commit([], [Put(partition_key("t", 0), packed)]) is not None
    return store


def _broker(store: LocalStore, node: int, live: set[int]) -> Any:
    return SimpleNamespace(
        node_id=node, store=store, view=SimpleNamespace(brokers=dict.fromkeys(live))
    )


async def _state(store: LocalStore) -> PartitionState:
    found = await read_partition(store, "t", 0)
    assert found is not None
    return found[0]


async def test_a_damaged_follower_leaves_the_isr_and_the_leader_stays() -> None:
    store = await _store(PartitionState((1, 2, 3), 1, 4, (1, 2, 3)))
    assert await withdraw(_broker(store, 2, {1, 2, 3}), "t", 0)
    assert await _state(store) == PartitionState((1, 2, 3), 1, 4, (1, 3))
    assert await withdraw(_broker(store, 2, {1, 2, 3}), "t", 0)  # already out: nothing to do
    assert await _state(store) == PartitionState((1, 2, 3), 1, 4, (1, 3))


async def test_a_damaged_leader_hands_over_to_a_live_in_sync_replica_in_a_new_epoch() -> None:
    store = await _store(PartitionState((1, 2, 3), 1, 4, (1, 2, 3)))
    assert await withdraw(_broker(store, 1, {1, 3}), "t", 0)  # 2 is not alive
    assert await _state(store) == PartitionState((1, 2, 3), 3, 5, (2, 3))


async def test_with_no_other_live_in_sync_replica_the_state_stays() -> None:
    alone = PartitionState((1,), 1, 0, (1,))
    store = await _store(alone)
    assert not await withdraw(_broker(store, 1, {1}), "t", 0)
    assert await _state(store) == alone
    lagging = PartitionState((1, 2), 1, 2, (1,))  # 2 is out of sync: no healthy copy
    store = await _store(lagging)
    assert not await withdraw(_broker(store, 1, {1, 2}), "t", 0)
    assert await _state(store) == lagging

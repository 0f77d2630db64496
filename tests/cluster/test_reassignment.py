"""Partition reassignment, preferred leader election and topic configs on the controller.

Brokers are controller seats on one store (both kinds), as in test_controller;
the leader of a partition is simulated by the test: it adds a caught-up
replica to the ISR with a compare-and-swap of the partition's state, as a
leader does.
"""

from __future__ import annotations

import asyncio

import msgpack
import pytest
from test_controller import TIMEOUT_S, cluster, crash, the_controller, until

from mq.errors import (
    ElectionNotNeededError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from mq.replication import cluster_state
from mq.replication.cluster_state import (
    ClusterView,
    TopicRecord,
    create_topic,
    partition_key,
    read_partition,
    update_partition,
    update_topic_configs,
)
from mq.replication.controller import ControllerSeat
from mq.replication.membership import campaign
from mq.replication.placement import PartitionState
from mq.replication.store import Compare, MetadataStore, Put

KEY = ("t", 0)


async def one_partition(controller: ControllerSeat, replication_factor: int) -> PartitionState:
    await controller.create_topic("t", 1, replication_factor, {})
    found = await read_partition(controller._store, *KEY)
    assert found is not None
    return found[0]


async def leader_adds_to_isr(store: MetadataStore, node: int) -> None:
    """What a leader does once ``node`` has caught up: CAS the state with it in the ISR."""
    found = await read_partition(store, *KEY)
    assert found is not None
    state, revision = found
    grown = state._replace(isr=(*state.isr, node))
    key = partition_key(*KEY)
    packed = cluster_state._pack_state(grown)
    assert await store.commit([Compare(key, revision)], [Put(key, packed)]) is not None


async def listed(controller: ControllerSeat, expected: dict[object, PartitionState]) -> None:
    """Wait for the controller's view (kept by its watch) to list ``expected``."""
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            if controller.list_reassignments() == expected:
                return
            await asyncio.sleep(0.02)


def test_a_state_without_a_reassignment_keeps_the_old_layout() -> None:
    old = msgpack.packb([[1, 2], 1, 3, [1, 2]])
    state = cluster_state._unpack_state(old)
    assert state == PartitionState((1, 2), 1, 3, (1, 2))
    assert cluster_state._pack_state(state) == old
    moving = PartitionState((3, 2, 1), 1, 3, (1, 2), (3,), (1,))
    assert cluster_state._unpack_state(cluster_state._pack_state(moving)) == moving


async def test_a_reassignment_completes_once_the_new_replica_is_in_sync(
    store: MetadataStore,
) -> None:
    async with cluster(store, 3) as seats:
        controller = await the_controller(seats)
        before = await one_partition(controller, 2)
        leaving, staying = before.replicas
        [new] = set(seats) - set(before.replicas)
        assert await controller.reassign_partitions({KEY: (new, staying)}) == {KEY: None}

        moving = await until(store, lambda v: v.partitions[KEY].reassigning)
        assert moving.partitions[KEY] == PartitionState(
            (new, staying, leaving), leaving, 0, before.isr, (new,), (leaving,)
        )
        await listed(controller, {KEY: moving.partitions[KEY]})

        await leader_adds_to_isr(store, new)
        done = await until(store, lambda v: not v.partitions[KEY].reassigning)
        # the new preferred leader is in sync: leadership moves to it
        assert done.partitions[KEY] == PartitionState((new, staying), new, 1, (staying, new))
        await listed(controller, {})


async def test_a_reassignment_that_only_removes_completes_at_once(store: MetadataStore) -> None:
    async with cluster(store, 3) as seats:
        controller = await the_controller(seats)
        before = await one_partition(controller, 3)
        target = before.replicas[1:]
        assert await controller.reassign_partitions({KEY: target}) == {KEY: None}
        done = await until(store, lambda v: v.partitions[KEY].replicas == target)
        state = done.partitions[KEY]
        assert (state.leader, state.leader_epoch, state.isr) == (target[0], 1, target)
        assert not state.reassigning


async def test_a_reassignment_is_cancelled_back_to_the_original_replicas(
    store: MetadataStore,
) -> None:
    async with cluster(store, 3) as seats:
        controller = await the_controller(seats)
        before = await one_partition(controller, 2)
        [new] = set(seats) - set(before.replicas)
        await controller.reassign_partitions({KEY: (new, before.replicas[1])})
        results = await controller.reassign_partitions({KEY: None})
        assert results == {KEY: None}
        view = await ClusterView.load(store)
        state = view.partitions[KEY]
        assert not state.reassigning
        assert sorted(state.replicas) == sorted(before.replicas)
        assert (state.leader, state.leader_epoch, state.isr) == (before.leader, 0, before.isr)
        [error] = (await controller.reassign_partitions({KEY: None})).values()
        assert isinstance(error, NoReassignmentInProgressError)


async def test_a_bad_target_is_refused_per_partition(store: MetadataStore) -> None:
    async with cluster(store, 3) as seats:
        controller = await the_controller(seats)
        before = await one_partition(controller, 2)
        victim = next(n for n in seats if seats[n] is not controller)
        await crash(store, seats, victim)
        alive = [n for n in seats if n not in before.replicas or n == before.replicas[0]]
        results = await controller.reassign_partitions(
            {
                KEY: (alive[0], victim),
                ("t", 1): (alive[0],),
                ("u", 0): (alive[0],),
            }
        )
        assert isinstance(results[KEY], InvalidReplicaAssignmentError)
        assert f"brokers [{victim}] are not alive" in str(results[KEY])
        assert isinstance(results[("t", 1)], UnknownTopicOrPartitionError)
        assert isinstance(results[("u", 0)], UnknownTopicOrPartitionError)
        [twice] = (await controller.reassign_partitions({KEY: (alive[0], alive[0])})).values()
        assert isinstance(twice, InvalidReplicaAssignmentError)
        assert not (await ClusterView.load(store)).partitions[KEY].reassigning
        bystander = next(s for s in seats.values() if s is not controller)
        with pytest.raises(NotControllerError):
            await bystander.reassign_partitions({KEY: (alive[0],)})


async def test_a_new_controller_finishes_a_reassignment_in_progress(
    store: MetadataStore,
) -> None:
    async with cluster(store, 4) as seats:
        controller = await the_controller(seats)
        me = controller.info.node_id
        before = await one_partition(controller, 2)
        [new, *_] = sorted(set(seats) - set(before.replicas) - {me})
        staying = next(r for r in before.replicas if r != me)
        await controller.reassign_partitions({KEY: (new, staying)})
        await crash(store, seats, me)
        successor = await the_controller(seats)
        assert successor is not controller
        await until(store, lambda v: me not in v.partitions[KEY].isr)
        await leader_adds_to_isr(store, new)
        done = await until(store, lambda v: not v.partitions[KEY].reassigning)
        assert done.partitions[KEY].replicas == (new, staying)
        assert done.partitions[KEY].leader == new


async def test_preferred_leader_election(store: MetadataStore) -> None:
    async with cluster(store, 3) as seats:
        controller = await the_controller(seats)
        before = await one_partition(controller, 3)
        preferred, other, _ = before.replicas
        assert controller.controller is not None
        found = await read_partition(store, *KEY)
        assert found is not None
        moved = before._replace(leader=other, leader_epoch=1)
        assert await update_partition(store, controller.controller, *KEY, moved, found[1])

        assert await controller.elect_preferred_leaders(None) == {KEY: None}
        view = await ClusterView.load(store)
        assert (view.leader_of(*KEY), view.partitions[KEY].leader_epoch) == (preferred, 2)
        [again] = (await controller.elect_preferred_leaders([KEY])).values()
        assert isinstance(again, ElectionNotNeededError)
        assert await controller.elect_preferred_leaders(None) == {}  # nothing to do

        # a preferred leader out of the ISR cannot lead
        found = await read_partition(store, *KEY)
        assert found is not None
        lagging = found[0]._replace(leader=other, leader_epoch=3, isr=(other,))
        assert await update_partition(store, controller.controller, *KEY, lagging, found[1])
        results = await controller.elect_preferred_leaders([KEY, ("nope", 0)])
        assert isinstance(results[KEY], PreferredLeaderNotAvailableError)
        assert isinstance(results[("nope", 0)], UnknownTopicOrPartitionError)
        assert (await ClusterView.load(store)).leader_of(*KEY) == other


async def test_topic_configs_change_in_the_view(store: MetadataStore) -> None:
    async with cluster(store, 1) as seats:
        controller = await the_controller(seats)
        await controller.create_topic("t", 1, 1, {"cleanup.policy": "compact"})
        view = await ClusterView.load(store)
        events = view.follow(store)
        await controller.alter_topic_configs("t", {"retention.ms": "1000"})
        await anext(events)
        assert view.topics["t"].configs == {"retention.ms": "1000"}
        assert view.topics["t"].partitions == 1
        await events.aclose()  # type: ignore[attr-defined]
        with pytest.raises(UnknownTopicOrPartitionError):
            await controller.alter_topic_configs("nope", {})


async def test_a_fenced_controller_cannot_change_configs(store: MetadataStore) -> None:
    lease = await store.grant_lease(10_000)
    old = await campaign(store, 1, lease)
    assert old is not None
    await create_topic(store, old, TopicRecord("t", "id", 1), [PartitionState.new((1,))])
    await store.revoke_lease(lease)
    new = await campaign(store, 2, await store.grant_lease(10_000))
    assert new is not None
    with pytest.raises(NotControllerError):
        await update_topic_configs(store, old, "t", {"retention.ms": "1"})
    assert await update_topic_configs(store, new, "t", {"retention.ms": "1"}) > new.epoch
    assert (await ClusterView.load(store)).topics["t"].configs == {"retention.ms": "1"}

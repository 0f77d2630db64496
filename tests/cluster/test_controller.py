"""The controller seat: one controller at a time, failover of leaders and of the controller.

Brokers are simulated by seats on one store (both kinds), each with its own
lease; a crash is the lease ending (revoked here, as etcd does when a broker
stops refreshing) with the seat's task cancelled, so it cannot resign.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from mq.errors import NotControllerError
from mq.replication.cluster_state import ClusterView
from mq.replication.controller import ControllerSeat
from mq.replication.membership import BrokerInfo, current_controller
from mq.replication.placement import NO_LEADER
from mq.replication.store import MetadataStore

TIMEOUT_S = 15


async def add_seat(store: MetadataStore, node_id: int) -> ControllerSeat:
    lease = await store.grant_lease(10_000)
    seat = ControllerSeat(store, BrokerInfo(node_id, "127.0.0.1", 9000 + node_id), lease)
    await seat.start()
    return seat


@contextlib.asynccontextmanager
async def cluster(store: MetadataStore, nodes: int) -> AsyncIterator[dict[int, ControllerSeat]]:
    seats = {n: await add_seat(store, n) for n in range(1, nodes + 1)}
    try:
        yield seats
    finally:
        for seat in seats.values():
            await seat.stop()


async def the_controller(seats: dict[int, ControllerSeat]) -> ControllerSeat:
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            sitting = [s for s in seats.values() if s.controller is not None]
            if len(sitting) == 1:
                return sitting[0]
            assert len(sitting) < 2, "two controllers"
            await asyncio.sleep(0.02)


async def crash(store: MetadataStore, seats: dict[int, ControllerSeat], node: int) -> None:
    seat = seats.pop(node)
    await seat.abandon()  # no resignation
    await store.revoke_lease(seat._lease)


async def until(store: MetadataStore, check: object) -> ClusterView:
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            view = await ClusterView.load(store)
            if check(view):  # type: ignore[operator]
                return view
            await asyncio.sleep(0.05)


async def test_leaders_move_off_a_dead_broker_and_the_controller_moves_too(
    store: MetadataStore,
) -> None:
    async with cluster(store, 3) as seats:
        controller = await the_controller(seats)
        with pytest.raises(NotControllerError):
            await next(s for s in seats.values() if s is not controller).create_topic("t", 6, 3, {})
        await controller.create_topic("t", 6, 3, {})
        before = await ClusterView.load(store)
        assert {before.leader_of("t", p) for p in range(6)} == {1, 2, 3}  # spread

        victim = next(n for n in seats if seats[n] is not controller)
        await crash(store, seats, victim)

        def moved(view: ClusterView) -> bool:
            return all(s.leader != victim and victim not in s.isr for s in view.partitions.values())

        after = await until(store, moved)
        for p in range(6):
            old, new = before.partitions[("t", p)], after.partitions[("t", p)]
            if old.leader == victim:
                assert new.leader_epoch == old.leader_epoch + 1
                assert new.leader in old.isr
            else:
                assert new.leader == old.leader

        # the controller dies: another takes over and keeps electing
        await crash(store, seats, controller.info.node_id)
        successor = await the_controller(seats)
        assert successor is not controller
        elected = await current_controller(store)
        assert elected is not None
        assert elected.node_id == successor.info.node_id
        [last] = seats
        await until(store, lambda v: all(s.leader == last for s in v.partitions.values()))


async def test_an_offline_partition_comes_back_with_its_replica(store: MetadataStore) -> None:
    async with cluster(store, 2) as seats:
        controller = await the_controller(seats)
        await controller.create_topic("single", 2, 1, {})
        view = await ClusterView.load(store)
        victim = next(n for n in seats if seats[n] is not controller)
        [orphan] = [p for p in range(2) if view.leader_of("single", p) == victim]
        epoch = view.partitions[("single", orphan)].leader_epoch
        await crash(store, seats, victim)
        await until(store, lambda v: v.partitions[("single", orphan)].leader == NO_LEADER)
        seats[victim] = await add_seat(store, victim)  # the broker restarts
        back = await until(store, lambda v: v.leader_of("single", orphan) == victim)
        assert back.partitions[("single", orphan)].leader_epoch == epoch + 2


async def test_a_clean_stop_hands_the_controller_over_at_once(store: MetadataStore) -> None:
    async with cluster(store, 2) as seats:
        controller = await the_controller(seats)
        await controller.stop()
        seats.pop(controller.info.node_id)
        successor = await the_controller(seats)
        assert successor is not controller

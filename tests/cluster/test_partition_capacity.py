"""The controller refuses replicas past a broker's registered ``max_partitions``.

Brokers are controller seats on one store (both kinds), as in test_controller,
each registering the limit of its file budget (:mod:`mq.broker.limits`). A topic
that would take one past it is refused whole, before anything is written; a
reassignment is refused for the partitions that would, and goes through for
the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from test_controller import TIMEOUT_S, the_controller

from mq.errors import PolicyViolationError
from mq.replication.cluster_state import ClusterView, read_partition
from mq.replication.controller import ControllerSeat
from mq.replication.membership import BrokerInfo
from mq.replication.store import MetadataStore

LIMITS = {1: 100, 2: 3, 3: 100}
"""Broker 2 may host three replicas."""


@contextlib.asynccontextmanager
async def limited(store: MetadataStore) -> AsyncIterator[dict[int, ControllerSeat]]:
    seats = {}
    try:
        for node, limit in LIMITS.items():
            lease = await store.grant_lease(10_000)
            info = BrokerInfo(node, "127.0.0.1", 9000 + node, limit)
            seats[node] = ControllerSeat(store, info, lease)
            await seats[node].start()
        yield seats
    finally:
        for seat in seats.values():
            await seat.stop()


async def view_has(store: MetadataStore, topic: str) -> ClusterView:
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            view = await ClusterView.load(store)
            if topic in view.topics:
                return view
            await asyncio.sleep(0.02)


async def test_topics_and_moves_past_a_broker_limit_are_refused(store: MetadataStore) -> None:
    async with limited(store) as seats:
        controller = await the_controller(seats)
        await controller.create_topic("a", 2, 3, {})  # broker 2 hosts two replicas
        controller._view = await view_has(store, "a")  # what its watch brings
        with pytest.raises(PolicyViolationError, match="broker 2 hosts 2 partitions"):
            await controller.create_topic("b", 2, 3, {})
        assert (await ClusterView.load(store)).topics.keys() == {"a"}

        await controller.create_topic("c", 3, 1, {})  # one per broker: 2 is full
        view = await view_has(store, "c")
        controller._view = view
        on = {s.replicas[0]: key for key, s in view.partitions.items() if key[0] == "c"}
        to_two = {on[1]: (2,), on[3]: (2,)}
        to_three = {on[1]: (3,)}
        results = await controller.reassign_partitions(to_two)
        assert all(isinstance(results[key], PolicyViolationError) for key in to_two)
        for key in to_two:
            found = await read_partition(store, *key)
            assert found is not None
            stays = 1 if key == on[1] else 3
            assert found[0].replicas == (stays,)
        assert await controller.reassign_partitions(to_three) == {on[1]: None}

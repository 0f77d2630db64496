"""Topics and partition states in the metadata store, against both stores."""

from __future__ import annotations

import asyncio

import pytest

from mq.errors import NotControllerError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from mq.replication.cluster_state import (
    ClusterView,
    TopicRecord,
    create_topic,
    delete_topic,
    read_partition,
    update_partition,
)
from mq.replication.membership import Controller, campaign
from mq.replication.placement import PartitionState, assign_replicas, elect_leader
from mq.replication.store import MetadataStore

TIMEOUT_S = 10


async def elected(store: MetadataStore, node_id: int = 1) -> Controller:
    lease = await store.grant_lease(10_000)
    controller = await campaign(store, node_id, lease)
    assert controller is not None
    return controller


def states(partitions: int) -> list[PartitionState]:
    return [PartitionState.new(r) for r in assign_replicas([1, 2, 3], partitions, 3, start=0)]


async def test_create_read_update_delete(store: MetadataStore) -> None:
    controller = await elected(store)
    topic = TopicRecord("events", "id-1", 3, {"cleanup.policy": "compact"})
    await create_topic(store, controller, topic, states(3))
    with pytest.raises(TopicAlreadyExistsError):
        await create_topic(store, controller, topic, states(3))
    found = await read_partition(store, "events", 1)
    assert found is not None
    state, revision = found
    assert state == PartitionState((2, 3, 1), 2, 0, (2, 3, 1))
    moved = elect_leader(state, {3, 1})
    assert await update_partition(store, controller, "events", 1, moved, revision) is not None
    # a second update from the same stale read loses the compare-and-swap
    assert await update_partition(store, controller, "events", 1, state, revision) is None
    view = await ClusterView.load(store)
    assert view.topics == {"events": topic}
    assert view.leader_of("events", 1) == 3
    await delete_topic(store, controller, "events")
    assert (await ClusterView.load(store)).partitions == {}
    with pytest.raises(UnknownTopicOrPartitionError):
        await delete_topic(store, controller, "events")


async def test_a_fenced_controller_is_told_so(store: MetadataStore) -> None:
    lease = await store.grant_lease(10_000)
    old = await campaign(store, 1, lease)
    assert old is not None
    await store.revoke_lease(lease)
    await elected(store, 2)
    with pytest.raises(NotControllerError):
        await create_topic(store, old, TopicRecord("t", "id", 1), states(1))
    assert (await ClusterView.load(store)).topics == {}


async def test_a_view_kept_by_its_watch_equals_a_fresh_load(store: MetadataStore) -> None:
    controller = await elected(store)
    await create_topic(store, controller, TopicRecord("a", "id-a", 2), states(2))
    view = await ClusterView.load(store)
    follow = view.follow(store)
    await create_topic(store, controller, TopicRecord("b", "id-b", 3), states(3))
    found = await read_partition(store, "a", 0)
    assert found is not None
    moved = elect_leader(found[0], {2, 3})
    assert await update_partition(store, controller, "a", 0, moved, found[1]) is not None
    await delete_topic(store, controller, "b")
    fresh = await ClusterView.load(store)
    async with asyncio.timeout(TIMEOUT_S):
        async for _ in follow:  # the events of one revision come one at a time
            if (view.topics, view.partitions) == (fresh.topics, fresh.partitions):
                break
    assert view.revision == fresh.revision
    assert view.leader_of("a", 0) == 2
    assert list(view.topics) == ["a"]
    await follow.aclose()  # type: ignore[attr-defined]

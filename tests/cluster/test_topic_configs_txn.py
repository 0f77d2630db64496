"""Configs of many topics in as few store transactions as the store allows (issue 18,
F5), on both stores: the embedded file and a real etcd, whose default
``--max-txn-ops`` (128) a request of hundreds of topics would break in one."""

from __future__ import annotations

import pytest

from mq.errors import NotControllerError
from mq.replication.cluster_state import (
    TXN_MAX_TOPICS,
    ClusterView,
    PartitionState,
    TopicRecord,
    create_topic,
    update_topics_configs,
)
from mq.replication.membership import campaign
from mq.replication.store import MetadataStore

TOPICS = 2 * TXN_MAX_TOPICS + 50
"""Three transactions' worth: past etcd's limit for one."""


async def test_the_configs_of_hundreds_of_topics_change_together(store: MetadataStore) -> None:
    controller = await campaign(store, 1, await store.grant_lease(10_000))
    assert controller is not None
    names = [f"t{i:03}" for i in range(TOPICS)]
    for name in names:
        await create_topic(
            store, controller, TopicRecord(name, name, 1), [PartitionState.new((1,))]
        )
    _, before = await store.get_prefix("/")
    wanted = {name: {"retention.ms": "1000"} for name in names} | {"gone": {"flush": "always"}}
    revision, failures = await update_topics_configs(store, controller, wanted)
    assert list(failures) == ["gone"]
    assert revision - before == 3  # one revision per transaction of TXN_MAX_TOPICS topics
    view = await ClusterView.load(store)
    assert all(view.topics[name].configs == {"retention.ms": "1000"} for name in names)


async def test_a_fenced_controller_changes_no_configs(store: MetadataStore) -> None:
    lease = await store.grant_lease(10_000)
    old = await campaign(store, 1, lease)
    assert old is not None
    await create_topic(store, old, TopicRecord("t", "t", 1), [PartitionState.new((1,))])
    await store.revoke_lease(lease)
    assert await campaign(store, 2, await store.grant_lease(10_000)) is not None
    with pytest.raises(NotControllerError):
        await update_topics_configs(store, old, {"t": {"retention.ms": "1"}})
    assert (await ClusterView.load(store)).topics["t"].configs == {}

"""Broker registration and controller election, against both metadata stores."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from mq.replication.membership import (
    BrokerInfo,
    HttpEndpoint,
    NodeIdInUseError,
    campaign,
    current_controller,
    fence,
    live_brokers,
    register,
    resign,
)
from mq.replication.store import EventKind, MetadataStore, Put

TIMEOUT_S = 10


async def test_brokers_register_once_per_node_id_and_leave_with_their_lease(
    store: MetadataStore,
) -> None:
    one, two = await store.grant_lease(5_000), await store.grant_lease(5_000)
    await register(store, BrokerInfo(1, "127.0.0.1", 9001), one)
    await register(store, BrokerInfo(2, "127.0.0.1", 9002), two)
    with pytest.raises(NodeIdInUseError):
        await register(store, BrokerInfo(1, "127.0.0.1", 9999), two)
    brokers, revision = await live_brokers(store)
    assert brokers == {
        1: BrokerInfo(1, "127.0.0.1", 9001),
        2: BrokerInfo(2, "127.0.0.1", 9002),
    }
    events = store.watch("/brokers/", revision)
    await store.revoke_lease(one)  # broker 1 dies
    async with asyncio.timeout(TIMEOUT_S):
        event = await anext(events)
    assert (event.kind, event.key) == (EventKind.DELETE, "/brokers/1")
    assert list((await live_brokers(store))[0]) == [2]
    await events.aclose()  # type: ignore[attr-defined]


async def test_a_registration_carries_the_http_endpoint_and_old_ones_still_load(
    store: MetadataStore,
) -> None:
    """Issue 21: the HTTP listener's address is registered; a registration written by
    an older version (no HTTP endpoint) loads with none."""
    lease = await store.grant_lease(5_000)
    listeners = (("PLAINTEXT", "127.0.0.1", 9001),)
    http = HttpEndpoint("127.0.0.1", 8081)
    await register(store, BrokerInfo(1, "127.0.0.1", 9001, 10, listeners, http), lease)
    old = msgpack.packb([2, "127.0.0.1", 9002, 10, [list(listeners[0])]])
    await store.commit([], [Put("/brokers/2", old, lease.id)])
    brokers, _ = await live_brokers(store)
    assert brokers[1] == BrokerInfo(1, "127.0.0.1", 9001, 10, listeners, http)
    assert brokers[1].http_url == "http://127.0.0.1:8081"
    assert brokers[2].http is None


async def test_one_controller_and_a_stale_one_is_fenced(store: MetadataStore) -> None:
    one, two = await store.grant_lease(5_000), await store.grant_lease(5_000)
    first = await campaign(store, 1, one)
    assert first is not None
    assert await campaign(store, 2, two) is None  # there is one already
    assert await current_controller(store) == first
    assert await store.commit([fence(first)], [Put("/partitions/t/0", b"a")]) is not None

    await store.revoke_lease(one)  # the controller's lease ends (it died or hung)
    second = await campaign(store, 2, two)
    assert second is not None
    assert second.epoch > first.epoch
    # the old controller wakes up and writes: refused
    assert await store.commit([fence(first)], [Put("/partitions/t/0", b"stale")]) is None
    entry = await store.get("/partitions/t/0")
    assert entry is not None
    assert entry.value == b"a"
    assert not await resign(store, first)
    assert await resign(store, second)
    assert await current_controller(store) is None

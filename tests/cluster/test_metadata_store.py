"""One suite for both metadata stores: the embedded LocalStore and etcd (a real server).

Every test runs against each store (the ``store`` fixture is parametrized);
tests of one store's own behaviour (the local file, an unreachable etcd) come
last.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from etcd_process import free_port

from mq.replication.etcd_store import EtcdStore, parse_etcd_url
from mq.replication.local_store import LocalStore
from mq.replication.store import (
    CompactedError,
    Compare,
    Delete,
    EventKind,
    MetadataStore,
    MetadataStoreError,
    Put,
    WatchEvent,
)

TIMEOUT_S = 10


async def next_events(events: AsyncIterator[WatchEvent], count: int) -> list[WatchEvent]:
    async with asyncio.timeout(TIMEOUT_S):
        return [await anext(events) for _ in range(count)]


async def test_put_get_delete_and_revisions(store: MetadataStore) -> None:
    assert await store.get("/a") is None
    first = await store.put("/a", b"1")
    second = await store.put("/a", b"2")
    assert second > first
    entry = await store.get("/a")
    assert entry is not None
    assert (entry.key, entry.value, entry.mod_revision) == ("/a", b"2", second)
    assert entry.create_revision == first
    assert await store.delete("/a") > second
    assert await store.get("/a") is None


async def test_create_if_absent_and_compare_and_swap(store: MetadataStore) -> None:
    created = await store.commit([Compare("/ctl", 0)], [Put("/ctl", b"node-1")])
    assert created is not None
    assert await store.commit([Compare("/ctl", 0)], [Put("/ctl", b"node-2")]) is None
    entry = await store.get("/ctl")
    assert entry is not None
    assert (entry.value, entry.mod_revision) == (b"node-1", created)
    swapped = await store.commit([Compare("/ctl", created)], [Put("/ctl", b"node-3")])
    assert swapped is not None
    assert await store.commit([Compare("/ctl", created)], [Put("/ctl", b"stale")]) is None
    entry = await store.get("/ctl")
    assert entry is not None
    assert entry.value == b"node-3"


async def test_a_guard_on_another_key_fences_a_stale_writer(store: MetadataStore) -> None:
    """A controller's writes compare the controller key: once it changed, they all fail."""
    epoch = await store.put("/controller", b"1")
    ok = await store.commit([Compare("/controller", epoch)], [Put("/p/0", b"a"), Put("/p/1", b"a")])
    assert ok is not None
    await store.put("/controller", b"2")  # a new controller
    stale = await store.commit([Compare("/controller", epoch)], [Put("/p/0", b"b"), Delete("/p/1")])
    assert stale is None
    entries, _ = await store.get_prefix("/p/")
    assert [(e.key, e.value) for e in entries] == [("/p/0", b"a"), ("/p/1", b"a")]  # nothing


async def test_get_prefix_is_sorted_and_bounded(store: MetadataStore) -> None:
    for key in ("/t/b", "/t/a", "/u/a", "/t2"):
        last = await store.put(key, key.encode())
    entries, revision = await store.get_prefix("/t/")
    assert [e.key for e in entries] == ["/t/a", "/t/b"]
    assert revision >= last


async def test_get_many_returns_the_existing_keys_only(store: MetadataStore) -> None:
    first = await store.put("/topics/a", b"1")
    second = await store.put("/topics/c", b"3")
    found = await store.get_many(["/topics/a", "/topics/b", "/topics/c", "/topics/a"])
    assert {key: (e.value, e.mod_revision) for key, e in found.items()} == {
        "/topics/a": (b"1", first),
        "/topics/c": (b"3", second),
    }
    assert await store.get_many([]) == {}


async def test_get_many_reads_more_keys_than_one_etcd_transaction_takes(
    store: MetadataStore,
) -> None:
    keys = [f"/topics/k{i:03d}" for i in range(300)]  # etcd: 128 reads per transaction
    written = {key: await store.put(key, key.encode()) for key in keys[::3]}
    found = await store.get_many(keys)
    assert {key: (e.value, e.mod_revision) for key, e in found.items()} == {
        key: (key.encode(), revision) for key, revision in written.items()
    }


async def test_watch_from_a_read_misses_nothing(store: MetadataStore) -> None:
    await store.put("/w/old", b"0")
    _, revision = await store.get_prefix("/w/")
    events = store.watch("/w/", revision)
    put = await store.put("/w/x", b"1")
    await store.put("/elsewhere", b"no")
    deleted = await store.delete("/w/old")
    got = await next_events(events, 2)
    assert got == [
        WatchEvent(EventKind.PUT, "/w/x", b"1", put),
        WatchEvent(EventKind.DELETE, "/w/old", b"", deleted),
    ]
    await events.aclose()  # type: ignore[attr-defined]


async def test_watch_replays_changes_after_a_past_revision(store: MetadataStore) -> None:
    start = await store.put("/r/a", b"1")
    second = await store.put("/r/b", b"2")
    events = store.watch("/r/", start)
    got = await next_events(events, 1)
    assert got == [WatchEvent(EventKind.PUT, "/r/b", b"2", second)]
    await events.aclose()  # type: ignore[attr-defined]


async def test_revoking_a_lease_deletes_its_keys(store: MetadataStore) -> None:
    lease = await store.grant_lease(5_000)
    await store.put("/brokers/1", b"alive", lease=lease.id)
    entry = await store.get("/brokers/1")
    assert entry is not None
    assert entry.lease == lease.id
    _, revision = await store.get_prefix("/brokers/")
    events = store.watch("/brokers/", revision)
    await store.revoke_lease(lease)
    [event] = await next_events(events, 1)
    assert (event.kind, event.key) == (EventKind.DELETE, "/brokers/1")
    assert await store.get("/brokers/1") is None
    assert not lease.lost.is_set()  # revoked, not lost
    await events.aclose()  # type: ignore[attr-defined]


async def test_an_unrefreshed_lease_expires_and_a_kept_one_does_not(
    store: MetadataStore,
) -> None:
    kept = await store.grant_lease(1_000)
    dying = await store.grant_lease(1_000, keepalive=False)
    await store.put("/l/kept", b"1", lease=kept.id)
    await store.put("/l/dying", b"1", lease=dying.id)
    for _ in range(100):  # etcd checks expiry about every 500 ms
        if await store.get("/l/dying") is None:
            break
        await asyncio.sleep(0.1)
    assert await store.get("/l/dying") is None
    await asyncio.sleep(1.5)  # longer than the TTL: only the refresh keeps it
    assert await store.get("/l/kept") is not None
    assert not kept.lost.is_set()


async def test_a_put_under_an_unknown_lease_is_refused(store: MetadataStore) -> None:
    with pytest.raises(MetadataStoreError):
        await store.put("/x", b"1", lease=123456789)
    assert await store.get("/x") is None


# -- one store's own behaviour ----------------------------------------------------------


async def test_the_local_store_survives_a_restart_without_its_leases(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    store = LocalStore(path)
    await store.start()
    await store.put("/topics/a", b"1")
    lease = await store.grant_lease(10_000)
    last = await store.put("/brokers/0", b"me", lease=lease.id)
    await store.close()
    reopened = LocalStore(path)
    await reopened.start()
    entry = await reopened.get("/topics/a")
    assert entry is not None
    assert entry.value == b"1"
    assert await reopened.get("/brokers/0") is None  # its lease died with the process
    assert await reopened.put("/next", b"") > last  # revisions never go back
    with pytest.raises(CompactedError):
        await anext(reopened.watch("/", 0))
    await reopened.close()


async def test_a_damaged_local_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    path.write_text("{not json")
    with pytest.raises(MetadataStoreError, match="cannot load"):
        await LocalStore(path).start()


async def test_an_unreachable_etcd_is_a_clear_error() -> None:
    store = EtcdStore("127.0.0.1", free_port())
    async with asyncio.timeout(TIMEOUT_S):
        with pytest.raises(MetadataStoreError, match="cannot reach etcd"):
            await store.start()


def test_etcd_urls() -> None:
    assert parse_etcd_url("etcd://127.0.0.1:2390") == ("127.0.0.1", 2390)
    assert parse_etcd_url("etcd://[::1]") == ("::1", 2379)
    with pytest.raises(MetadataStoreError):
        parse_etcd_url("http://127.0.0.1:2379")

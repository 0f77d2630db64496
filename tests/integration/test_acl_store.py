"""ACL bindings in the metadata store and the broker's cache of them (the embedded store).

The cache loads with one read and follows the ``/acls/`` prefix: a binding put
or deleted by anyone (another broker, the offline CLI) reaches it by the watch.
The etcd store is exercised by the cluster test (tests/cluster/test_acl_cluster.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import msgpack

from mq.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType
from mq.broker.acl_store import (
    ACLS,
    AclCache,
    acl_key,
    decode_binding,
    delete_bindings,
    encode_binding,
    put_bindings,
    read_bindings,
)
from mq.replication.local_store import LocalStore

WAIT_S = 5.0

A = AclBinding("User:alice", Permission.ALLOW, Operation.WRITE, ResourceType.TOPIC, "orders")
B = AclBinding(
    "User:bob", Permission.DENY, Operation.READ, ResourceType.GROUP, "app.", PatternType.PREFIXED
)


def test_the_key_is_the_binding_and_the_value_round_trips() -> None:
    assert acl_key(A) == acl_key(
        AclBinding("User:alice", Permission.ALLOW, Operation.WRITE, ResourceType.TOPIC, "orders")
    )
    assert acl_key(A) != acl_key(B)
    assert acl_key(A).startswith(ACLS)
    assert decode_binding(encode_binding(B)) == B


async def test_the_cache_follows_puts_and_deletes(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "metadata.json")
    await store.start()
    try:
        await put_bindings(store, [A])
        cache = AclCache()
        await cache.load(store)
        assert set(cache.index) == {A}
        follow = asyncio.get_running_loop().create_task(cache.follow(store))
        try:
            await put_bindings(store, [B])
            assert await cache.wait_until(lambda: B in cache.index, WAIT_S)
            assert cache.index.authorize(
                "User:alice", "h", Operation.WRITE, ResourceType.TOPIC, "orders"
            )
            assert not cache.index.authorize(
                "User:bob", "h", Operation.READ, ResourceType.GROUP, "app.x"
            )
            await delete_bindings(store, [A])
            assert await cache.wait_until(lambda: A not in cache.index, WAIT_S)
            assert not cache.index.authorize(
                "User:alice", "h", Operation.WRITE, ResourceType.TOPIC, "orders"
            )
            # a put of what is there already changes nothing
            await put_bindings(store, [B])
            await store.put("/topics-not-acls", b"x")
            revision = await store.put("/acls/junk", msgpack.packb({"principal": "nobody"}))
            assert await cache.wait_until(lambda: cache.revision >= revision, WAIT_S)
            assert set(cache.index) == {B}  # the malformed entry is skipped
            assert not await cache.wait_until(lambda: A in cache.index, 0.05)
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow
        bindings, _ = await read_bindings(store)
        assert bindings == [B]
    finally:
        await store.close()


async def test_empty_changes_write_nothing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "metadata.json")
    await store.start()
    try:
        assert await put_bindings(store, []) is None
        assert await delete_bindings(store, []) is None
    finally:
        await store.close()


async def test_a_reload_drops_what_went_meanwhile(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "metadata.json")
    await store.start()
    try:
        await put_bindings(store, [A, B])
        cache = AclCache()
        await cache.load(store)
        await delete_bindings(store, [A])
        await cache.load(store)  # what follow does after a compacted watch
        assert set(cache.index) == {B}
    finally:
        await store.close()


async def test_the_watch_survives_a_failure_and_reloads(tmp_path: Path) -> None:
    """A watch that breaks (the store out of reach, or a bug) is reloaded: changes made
    meanwhile still arrive."""
    store = LocalStore(tmp_path / "metadata.json")
    await store.start()
    cache = AclCache()
    await cache.load(store)
    failures = iter([RuntimeError("a bug"), None])
    original = store.watch

    def flaky(prefix: str, after: int) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return original(prefix, after)

    store.watch = flaky  # type: ignore[method-assign]
    follow = asyncio.get_running_loop().create_task(cache.follow(store))
    try:
        await put_bindings(store, [A])
        assert await cache.wait_until(lambda: A in cache.index, WAIT_S)
    finally:
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
        await store.close()

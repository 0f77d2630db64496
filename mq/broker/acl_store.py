"""ACL bindings in the metadata store, and the cache every broker keeps of them.

Keys: ``/acls/<digest>``, one per binding, where the digest is the SHA-256 of
the binding's canonical msgpack encoding (so adding a binding twice writes one
key, and deleting one needs no search); the value is that encoding (a map of
strings, :func:`~mq.acl.model.binding_fields`). The keys live in the same store
as the cluster's metadata: the embedded file of a single node, or etcd.

:class:`AclCache` loads every binding with one read and follows the prefix
with a watch from that read's revision (as :class:`~mq.replication.cluster_state.
ClusterView` follows the cluster), so a binding written through any broker is
in every broker's :class:`~mq.acl.index.AclIndex` as soon as the watch
delivers it: milliseconds, well within the second the issue asks.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Iterable

import msgpack

from mq.acl.index import AclIndex
from mq.acl.model import AclBinding, InvalidAclError, binding_fields, binding_from_fields
from mq.errors import MQError
from mq.replication.store import (
    CompactedError,
    Delete,
    EventKind,
    MetadataStore,
    Put,
    WatchEvent,
)

log = logging.getLogger(__name__)

ACLS = "/acls/"
RETRY_S = 0.5
"""Pause before reloading after the watch failed (the store out of reach)."""


def acl_key(binding: AclBinding) -> str:
    return f"{ACLS}{hashlib.sha256(encode_binding(binding)).hexdigest()}"


def encode_binding(binding: AclBinding) -> bytes:
    fields = binding_fields(binding)
    return msgpack.packb({key: fields[key] for key in sorted(fields)})


def decode_binding(raw: bytes) -> AclBinding:
    try:
        fields = msgpack.unpackb(raw)
    except (ValueError, msgpack.ExtraData) as exc:
        raise InvalidAclError(f"not msgpack: {exc}") from exc
    if not isinstance(fields, dict):
        raise InvalidAclError("an ACL binding is a map")
    return binding_from_fields(fields)


async def put_bindings(store: MetadataStore, bindings: Iterable[AclBinding]) -> int | None:
    """Write bindings (one transaction); the revision, or None if there was nothing."""
    puts = [Put(acl_key(b), encode_binding(b)) for b in bindings]
    if not puts:
        return None
    return await store.commit([], list(puts))


async def delete_bindings(store: MetadataStore, bindings: Iterable[AclBinding]) -> int | None:
    """Delete bindings (one transaction); the revision, or None if there was nothing."""
    deletes = [Delete(acl_key(b)) for b in bindings]
    if not deletes:
        return None
    return await store.commit([], list(deletes))


async def read_bindings(store: MetadataStore) -> tuple[list[AclBinding], int]:
    """Every binding in the store (one read), and the revision it is from."""
    entries, revision = await store.get_prefix(ACLS)
    bindings = []
    for entry in entries:
        binding = _decode_entry(entry.key, entry.value)
        if binding is not None:
            bindings.append(binding)
    return bindings, revision


def _decode_entry(key: str, raw: bytes) -> AclBinding | None:
    try:
        return decode_binding(raw)
    except InvalidAclError as exc:  # written by something else: skipped, never trusted
        log.error("ignoring the malformed ACL binding at %s: %s", key, exc)
        return None


class AclCache:
    """Every ACL binding of the cluster, kept current from the metadata store."""

    def __init__(self) -> None:
        self.index = AclIndex()
        self.revision = 0
        self._by_key: dict[str, AclBinding] = {}
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    async def load(self, store: MetadataStore) -> None:
        """Replace the cache with one consistent read of the store."""
        entries, revision = await store.get_prefix(ACLS)
        by_key: dict[str, AclBinding] = {}
        for entry in entries:
            binding = _decode_entry(entry.key, entry.value)
            if binding is not None:
                by_key[entry.key] = binding
        for key in set(self._by_key) - set(by_key):
            self.index.remove(self._by_key.pop(key))
        for key, binding in by_key.items():
            self._replace(key, binding)
        self.revision = max(self.revision, revision)
        self._wake()

    def apply(self, event: WatchEvent) -> None:
        """Bring the cache up to one change of the store."""
        if event.kind is EventKind.PUT:
            binding = _decode_entry(event.key, event.value)
            if binding is not None:
                self._replace(event.key, binding)
        else:
            old = self._by_key.pop(event.key, None)
            if old is not None:
                self.index.remove(old)
        self.revision = max(self.revision, event.revision)
        self._wake()

    def _wake(self) -> None:
        if not self._waiters:
            return
        waiting = []
        for done, future in self._waiters:
            if done():
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((done, future))
        self._waiters = waiting

    def _replace(self, key: str, binding: AclBinding) -> None:
        old = self._by_key.get(key)
        if old is not None and old != binding:
            self.index.remove(old)
        self._by_key[key] = binding
        self.index.add(binding)

    async def follow(self, store: MetadataStore) -> None:
        """Apply every change, for as long as the broker runs (a task; reloads after
        the watch fails, as the broker's metadata watch does)."""
        while True:
            try:
                async with contextlib.aclosing(store.watch(ACLS, self.revision)) as events:
                    async for event in events:
                        self.apply(event)
            except CompactedError:
                log.warning("the ACL watch fell behind; reloading")
            except MQError as exc:
                log.warning("the ACL watch: %s", exc)
                await asyncio.sleep(RETRY_S)
            except Exception:  # a bug must not freeze the ACLs for good: log, reload
                log.exception("the ACL watch failed")
                await asyncio.sleep(RETRY_S)
            try:
                await self.load(store)
            except MQError as exc:
                log.warning("reloading the ACLs: %s", exc)
                await asyncio.sleep(RETRY_S)

    async def wait_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Until ``done()`` holds of the cache (checked after each change it applies):
        a change made through this broker is then visible to its next request;
        False if ``timeout_s`` passes first."""
        if done():
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((done, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            return False
        finally:
            self._waiters = [(d, f) for d, f in self._waiters if f is not future]
        return True

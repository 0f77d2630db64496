"""The metadata store on etcd (v3 API, through the asyncio client ``aetcd``).

``mq serve --metadata etcd://HOST:PORT`` uses this store. Keys live under a
root prefix (default ``/mq``) so several clusters can share one etcd.
Transactions map onto etcd's Txn (a compare on ``mod_revision``, or on
``version == 0`` for an absent key); leases onto etcd leases, refreshed by a
task every third of their time to live; watches onto etcd watches from
``after_revision + 1``.

Every aetcd or gRPC failure is raised as
:class:`~mq.replication.store.MetadataStoreError` (retriable), a compacted
watch revision as :class:`~mq.replication.store.CompactedError`.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
from collections.abc import AsyncGenerator, Awaitable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aetcd
import aetcd.exceptions

from mq.errors import MQError
from mq.replication.breakers import Breakers
from mq.replication.store import (
    CompactedError,
    Compare,
    Entry,
    EventKind,
    Lease,
    MetadataStore,
    MetadataStoreError,
    Operation,
    Put,
    WatchEvent,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_ROOT = "/mq"
REQUEST_TIMEOUT_S = 5
CANCEL_TIMEOUT_S = 0.5
GET_MANY_OPS = 128
"""Keys read per transaction by :meth:`EtcdStore.get_many`: etcd's default bound on the
operations of one transaction (``--max-txn-ops``)."""


def parse_etcd_url(url: str) -> tuple[str, int]:
    """``etcd://HOST:PORT`` → (host, port); the port defaults to etcd's 2379."""
    parts = urlsplit(url)
    if parts.scheme != "etcd" or not parts.hostname:
        raise MetadataStoreError(f"an etcd address looks like etcd://HOST:PORT, not {url!r}")
    return parts.hostname, parts.port or 2379


class EtcdStore(MetadataStore):
    """A :class:`MetadataStore` in etcd, every key under ``root``."""

    def __init__(self, host: str, port: int, *, root: str = DEFAULT_ROOT) -> None:
        self._host = host
        self._port = port
        self._root = root.rstrip("/")
        self._client: aetcd.Client | None = None
        self._keepalives: dict[int, asyncio.Task[None]] = {}
        self._breakers = Breakers()
        self._name = f"etcd {host}:{port}"

    @classmethod
    def from_url(cls, url: str, *, root: str = DEFAULT_ROOT) -> EtcdStore:
        return cls(*parse_etcd_url(url), root=root)

    async def start(self) -> None:
        client = aetcd.Client(self._host, self._port, timeout=REQUEST_TIMEOUT_S)
        try:
            await client.connect()
            await client.status()
        except (aetcd.exceptions.ClientError, OSError) as exc:
            await client.close()
            raise MetadataStoreError(
                f"cannot reach etcd at {self._host}:{self._port}: {exc}"
            ) from exc
        self._client = client

    async def close(self) -> None:
        for task in self._keepalives.values():
            task.cancel()
        self._keepalives.clear()
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(aetcd.exceptions.ClientError):
                await client.close()

    # -- keys -----------------------------------------------------------------------

    def _key(self, key: str) -> bytes:
        return f"{self._root}{key}".encode()

    def _unkey(self, raw: bytes) -> str:
        return raw.decode()[len(self._root) :]

    def _entry(self, kv: Any) -> Entry:
        return Entry(
            self._unkey(kv.key), kv.value, kv.mod_revision, kv.create_revision, kv.lease or 0
        )

    # -- reads ------------------------------------------------------------------------

    async def get(self, key: str) -> Entry | None:
        found = await self._call(self._connected().get(self._key(key)))
        return None if found is None else self._entry(found)

    async def get_many(self, keys: Iterable[str]) -> dict[str, Entry]:
        """Reads of :data:`GET_MANY_OPS` keys per transaction (one round trip each)."""
        client = self._connected()
        txn = client.transactions
        unique = list(dict.fromkeys(keys))
        found: dict[str, Entry] = {}
        for start in range(0, len(unique), GET_MANY_OPS):
            chunk = unique[start : start + GET_MANY_OPS]
            reads = [txn.get(self._key(key)) for key in chunk]
            _, responses = await self._call(client.transaction([], reads, []))
            for key, response in zip(chunk, responses, strict=True):
                if response:  # [(value, its key-value)], or empty: no such key
                    found[key] = self._entry(response[0][1])
        return found

    async def get_prefix(self, prefix: str) -> tuple[list[Entry], int]:
        found = await self._call(self._connected().get_prefix(self._key(prefix)))
        return [self._entry(kv) for kv in found], int(found.header.revision)

    # -- writes -----------------------------------------------------------------------

    async def commit(self, compares: list[Compare], operations: list[Operation]) -> int | None:
        client = self._connected()
        txn = client.transactions
        guards = [
            txn.version(self._key(c.key)) == 0
            if c.mod_revision == 0
            else txn.mod(self._key(c.key)) == c.mod_revision
            for c in compares
        ]
        ops = [
            txn.put(self._key(op.key), op.value, lease=op.lease or None)
            if isinstance(op, Put)
            else txn.delete(self._key(op.key))
            for op in operations
        ]
        if not ops:
            ops = [txn.get(self._key("/"))]  # a read, for the revision
        succeeded, responses = await self._call(client.transaction(guards, ops, []))
        if not succeeded:
            return None
        first = responses[0]
        if isinstance(first, list):  # the read: [(value, Get)], maybe empty
            if first:
                return int(first[0][1].header.revision)
            return (await self.get_prefix("/\0"))[1]
        which = first.WhichOneof("response")
        return int(getattr(first, which).header.revision)

    # -- leases ---------------------------------------------------------------------

    async def grant_lease(self, ttl_ms: int, *, keepalive: bool = True) -> Lease:
        if ttl_ms <= 0:
            raise MetadataStoreError(f"a lease needs a positive time to live, got {ttl_ms} ms")
        granted = await self._call(self._connected().lease(math.ceil(ttl_ms / 1000)))
        lease = Lease(int(granted.id), ttl_ms)
        if keepalive:
            self._keepalives[lease.id] = asyncio.get_running_loop().create_task(
                self._keep_alive(lease), name=f"etcd-lease-{lease.id}"
            )
        return lease

    async def _keep_alive(self, lease: Lease) -> None:
        """Refresh every third of the TTL; a lease unrefreshed for a whole TTL is lost."""
        period = lease.ttl_ms / 3000
        last_ok = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(period)
            try:
                refreshed = await self._call(self._connected().refresh_lease(lease.id))
                if int(getattr(refreshed, "TTL", 1)) <= 0:
                    break  # etcd no longer knows it: expired
                last_ok = asyncio.get_running_loop().time()
            except MetadataStoreError as exc:
                log.warning("refreshing etcd lease %d: %s", lease.id, exc)
                if asyncio.get_running_loop().time() - last_ok > lease.ttl_ms / 1000:
                    break
        self._keepalives.pop(lease.id, None)
        lease.lost.set()

    async def revoke_lease(self, lease: Lease) -> None:
        task = self._keepalives.pop(lease.id, None)
        if task is not None:
            task.cancel()
        await self._call(self._connected().revoke_lease(lease.id))

    # -- watches ------------------------------------------------------------------------

    async def watch(self, prefix: str, after_revision: int) -> AsyncGenerator[WatchEvent, None]:
        client = self._connected()
        watch = await self._call(
            client.watch_prefix(self._key(prefix), start_revision=after_revision + 1)
        )
        try:
            async for event in watch:
                kind = EventKind.PUT if event.kind == aetcd.EventKind.PUT else EventKind.DELETE
                value = event.kv.value if kind is EventKind.PUT else b""
                yield WatchEvent(kind, self._unkey(event.kv.key), value, event.kv.mod_revision)
        except aetcd.exceptions.RevisionCompactedError as exc:
            raise CompactedError(f"etcd compacted revisions up to {exc}") from exc
        except aetcd.exceptions.ClientError as exc:
            _raise_if_cancelling(exc)
            raise MetadataStoreError(f"etcd watch of {prefix!r} failed: {exc}") from exc
        finally:
            if self._client is client:  # a closed client has cancelled its watches
                with contextlib.suppress(aetcd.exceptions.ClientError, TimeoutError):
                    # bounded: etcd may be gone, and aetcd serialises cancels with
                    # watch creations behind one lock; an uncancelled watch dies
                    # with the client at the latest
                    async with asyncio.timeout(CANCEL_TIMEOUT_S):
                        await watch.cancel()

    # -- plumbing -------------------------------------------------------------------------

    def _connected(self) -> aetcd.Client:
        if self._client is None:
            raise MetadataStoreError("the etcd store is not started")
        return self._client

    async def _call(self, request: Awaitable[T]) -> T:
        """Every request to etcd, through its circuit breaker (issue 20): while etcd keeps
        failing, calls fail at once with MetadataStoreError instead of each waiting out
        the client's timeout."""
        try:
            return await self._breakers.call(
                self._name, lambda: self._send(request), (MetadataStoreError,), _unavailable
            )
        finally:
            if inspect.iscoroutine(request):
                request.close()  # not sent (failed fast): never awaited; else a no-op

    async def _send(self, request: Awaitable[T]) -> T:
        try:
            return await request
        except aetcd.exceptions.ClientError as exc:
            _raise_if_cancelling(exc)
            raise MetadataStoreError(f"etcd at {self._host}:{self._port}: {exc}") from exc


def _unavailable(message: str) -> MQError:
    return MetadataStoreError(message)


def _raise_if_cancelling(exc: Exception) -> None:
    """A cancelled gRPC call surfaces as an aetcd error: keep it a cancellation."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc

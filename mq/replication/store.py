"""The metadata store: a small, etcd-shaped key-value interface the cluster runs on.

Everything the cluster agrees on (live brokers, the controller, topics, each
partition's replicas, leader, leader epoch and ISR) is kept in one
:class:`MetadataStore`, with two implementations that pass one test suite:

* :class:`~mq.replication.local_store.LocalStore`: the embedded default, a file
  in the data directory, for a single node that needs no external service;
* :class:`~mq.replication.etcd_store.EtcdStore`: etcd through ``aetcd``, for a
  cluster.

The interface is etcd's, cut to what the controller needs:

* every write bumps the store's **revision**; each entry remembers the
  revision that last modified it (``mod_revision``);
* :meth:`MetadataStore.commit` is a transaction: a list of
  :class:`Compare` guards (a key's ``mod_revision``, 0 meaning absent) and a
  list of :class:`Put` / :class:`Delete` operations, applied all or nothing.
  That is compare-and-swap, create-if-absent, and "only if I am still the
  controller" (compare the controller key's revision) in one call;
* a **lease** has a time to live and is kept alive by the store until it is
  revoked or lost; keys put under a lease are deleted when it ends, which is
  how a dead broker's registration disappears;
* :meth:`MetadataStore.watch` yields the changes under a prefix after a
  given revision, so that ``get_prefix`` then ``watch(prefix, revision)``
  misses nothing.

Keys are ``/``-separated text; values are bytes (the callers use msgpack).
"""

from __future__ import annotations

import asyncio
import enum
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeAlias

from mq.errors import MQError

CREATE_ATTEMPTS = 10
"""Reads and create-if-absent attempts of :meth:`MetadataStore.get_or_create`: each
failed attempt means another broker created the key meanwhile, so the next read
finds it; ten covers a key being deleted and remade under us."""


class MetadataStoreError(MQError):
    """The metadata store could not be reached or refused a request (local, retriable)."""

    retriable = True


class CompactedError(MetadataStoreError):
    """A watch asked for changes older than the store keeps."""

    retriable = False


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    value: bytes
    mod_revision: int
    """Revision of the write that set this value."""
    create_revision: int
    lease: int = 0
    """The lease the key lives under (0: none)."""


@dataclass(frozen=True, slots=True)
class Compare:
    """A transaction guard: ``key`` was last written at ``mod_revision`` (0: it is absent)."""

    key: str
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    key: str


Operation: TypeAlias = Put | Delete


class EventKind(enum.Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: EventKind
    key: str
    value: bytes
    """The new value (empty for a delete)."""
    revision: int


@dataclass
class Lease:
    """A lease the store keeps alive; :attr:`lost` is set if it ends without a revoke."""

    id: int
    ttl_ms: int
    lost: asyncio.Event = field(default_factory=asyncio.Event)


class MetadataStore(ABC):
    """What the cluster's metadata lives in (see the module docstring)."""

    @abstractmethod
    async def start(self) -> None:
        """Connect (or load); raises :class:`MetadataStoreError` when it cannot."""

    @abstractmethod
    async def close(self) -> None:
        """Stop keeping leases alive (they expire on their own) and disconnect."""

    @abstractmethod
    async def get(self, key: str) -> Entry | None: ...

    async def get_many(self, keys: Iterable[str]) -> dict[str, Entry]:
        """The entries of those of ``keys`` that exist (a request naming 100,000 topics
        asks once, not 100,000 times, where the store can: the embedded one can)."""
        found = {}
        for key in keys:
            entry = await self.get(key)
            if entry is not None:
                found[key] = entry
        return found

    @abstractmethod
    async def get_prefix(self, prefix: str) -> tuple[list[Entry], int]:
        """Every entry under ``prefix`` (by key), and the store's revision they are from."""

    @abstractmethod
    async def commit(self, compares: list[Compare], operations: list[Operation]) -> int | None:
        """Apply ``operations`` if every compare holds: the new revision, or None if not."""

    @abstractmethod
    async def grant_lease(self, ttl_ms: int, *, keepalive: bool = True) -> Lease:
        """A new lease of ``ttl_ms``, refreshed by the store unless ``keepalive`` is False."""

    @abstractmethod
    async def revoke_lease(self, lease: Lease) -> None:
        """End a lease now: its keys are deleted."""

    @abstractmethod
    def watch(self, prefix: str, after_revision: int) -> AsyncGenerator[WatchEvent, None]:
        """Changes under ``prefix`` made after ``after_revision``, as they happen.

        Raises :class:`CompactedError` when the store no longer has them;
        the caller then reads the prefix again. Closing the iterator (``aclose``
        or leaving an ``async for``) ends the watch.
        """

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> int:
        """Write unconditionally; the new revision."""
        revision = await self.commit([], [Put(key, value, lease)])
        assert revision is not None
        return revision

    async def delete(self, key: str) -> int:
        revision = await self.commit([], [Delete(key)])
        assert revision is not None
        return revision

    async def get_or_create(self, key: str, make: Callable[[], bytes]) -> bytes:
        """``key``'s value, made with ``make`` and written if the key is absent: the
        first of the brokers racing to create it wins, the others read its value."""
        for _ in range(CREATE_ATTEMPTS):
            entry = await self.get(key)
            if entry is not None:
                return entry.value
            made = make()
            if await self.commit([Compare(key, 0)], [Put(key, made)]):
                return made
        raise MetadataStoreError(f"could not read or create {key} in the metadata store")

"""The embedded metadata store: one process, one file, no external service.

The single-node default (``mq serve`` with no ``--metadata``) keeps its
metadata here, behind the same :class:`~mq.replication.store.MetadataStore`
interface as etcd, so the broker has one code path. Entries are in memory and,
with a ``path``, written to a JSON file (atomically, synced) before a
commit returns; keys under a lease are not written, since a lease does not
outlive its process. The file is encoded and written in a worker thread, never
on the event loop, one write at a time; commits made while a write is under way
share the next one (group commit), so a burst of commits costs two writes, not
one per commit. Recent changes are kept in memory for watches; a watch from before
them (or from before a restart) raises :class:`CompactedError`.

Leases kept alive never expire while the store is open; one granted with
``keepalive=False`` expires ``ttl_ms`` after it was granted (what a broker
that stopped heart-beating looks like).

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncGenerator, Iterable
from pathlib import Path

from mq.replication.store import (
    CompactedError,
    Compare,
    Delete,
    Entry,
    EventKind,
    Lease,
    MetadataStore,
    MetadataStoreError,
    Operation,
    Put,
    WatchEvent,
)
from mq.storage.fileio import DEFAULT_IO, FileIO

HISTORY = 10_000
"""Changes kept for watches that start in the past."""
FORMAT_VERSION = 1


class LocalStore(MetadataStore):
    """A :class:`MetadataStore` in this process (persisted to ``path`` if given)."""

    def __init__(self, path: Path | None = None, *, io: FileIO = DEFAULT_IO) -> None:
        self._path = path
        self._io = io
        self._entries: dict[str, Entry] = {}
        self._revision = 0
        self._history: deque[WatchEvent] = deque(maxlen=HISTORY)
        self._compacted = 0
        """Changes up to this revision are no longer in :attr:`_history`."""
        self._watchers: list[tuple[str, asyncio.Queue[WatchEvent]]] = []
        self._leases: dict[int, tuple[Lease, float | None]] = {}
        """Lease id → (lease, monotonic deadline or None when kept alive)."""
        self._lease_ids = itertools.count(int(time.time() * 1000) << 16)
        self._expiry: asyncio.Task[None] | None = None
        self._open = False
        self._saved = 0
        """The revision the file holds."""
        self._saving: asyncio.Task[None] | None = None
        """The write in a worker thread under way, if any."""
        self.writes = 0
        """Files written since start (what tests count: one per request, not per entry)."""

    async def start(self) -> None:
        if self._path is not None and self._path.exists():
            self._load(self._path)
        self._compacted = self._saved = self._revision
        self._open = True
        self._expiry = asyncio.get_running_loop().create_task(self._expire_loop())

    def _load(self, path: Path) -> None:
        try:
            body = json.loads(path.read_bytes())
            if body.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {body.get('version')}")
            self._revision = int(body["revision"])
            for raw in body["entries"]:
                entry = Entry(
                    raw["key"],
                    base64.b64decode(raw["value"]),
                    int(raw["mod_revision"]),
                    int(raw["create_revision"]),
                )
                self._entries[entry.key] = entry
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MetadataStoreError(f"{path}: cannot load the metadata: {exc}") from exc

    async def close(self) -> None:
        self._open = False
        if self._saving is not None:  # what was committed is on disk before close returns
            await asyncio.gather(asyncio.shield(self._saving), return_exceptions=True)
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    # -- reads --------------------------------------------------------------------

    async def get(self, key: str) -> Entry | None:
        self._check_open()
        return self._entries.get(key)

    async def get_many(self, keys: Iterable[str]) -> dict[str, Entry]:
        self._check_open()
        entries = self._entries
        return {key: entries[key] for key in keys if key in entries}

    async def get_prefix(self, prefix: str) -> tuple[list[Entry], int]:
        self._check_open()
        found = [e for k, e in sorted(self._entries.items()) if k.startswith(prefix)]
        return found, self._revision

    # -- writes -------------------------------------------------------------------

    async def commit(self, compares: list[Compare], operations: list[Operation]) -> int | None:
        self._check_open()
        for compare in compares:
            entry = self._entries.get(compare.key)
            if (entry.mod_revision if entry else 0) != compare.mod_revision:
                return None
        for op in operations:
            if isinstance(op, Put) and op.lease and op.lease not in self._leases:
                raise MetadataStoreError(f"lease {op.lease} does not exist")
        revision = self._apply(operations)
        await self._persist(revision)
        return revision

    def _apply(self, operations: list[Operation]) -> int:
        self._revision += 1
        revision = self._revision
        for op in operations:
            old = self._entries.get(op.key)
            if isinstance(op, Put):
                created = old.create_revision if old else revision
                self._entries[op.key] = Entry(op.key, op.value, revision, created, op.lease)
                self._publish(WatchEvent(EventKind.PUT, op.key, op.value, revision))
            elif old is not None:
                del self._entries[op.key]
                self._publish(WatchEvent(EventKind.DELETE, op.key, b"", revision))
        return revision

    async def _persist(self, revision: int) -> None:
        """Return once the file holds ``revision`` (or a later one): every revision is
        saved, so that revisions never go back after a restart.

        One write at a time, of the newest state, in a worker thread; a commit
        arriving during a write waits for it, then for the next, which carries its
        change and every other made meanwhile."""
        path = self._path
        if path is None:
            return
        while self._saved < revision:
            if self._saving is None:
                # the entries are immutable: a copy of the list is the snapshot, and
                # the encoding (linear in the metadata) happens in the thread too
                snapshot = (self._revision, list(self._entries.values()))
                self._saving = asyncio.get_running_loop().create_task(self._write(path, snapshot))
            await asyncio.shield(self._saving)

    async def _write(self, path: Path, snapshot: tuple[int, list[Entry]]) -> None:
        try:
            await asyncio.to_thread(self._write_file, path, *snapshot)
            self._saved = max(self._saved, snapshot[0])
            self.writes += 1
        except OSError as exc:
            raise MetadataStoreError(f"{path}: cannot write the metadata: {exc}") from exc
        finally:
            self._saving = None

    def _write_file(self, path: Path, revision: int, entries: list[Entry]) -> None:
        """Encode and write the file (in a worker thread: touches nothing shared)."""
        saved = [
            {
                "key": e.key,
                "value": base64.b64encode(e.value).decode(),
                "mod_revision": e.mod_revision,
                "create_revision": e.create_revision,
            }
            for e in entries
            if not e.lease
        ]
        body = {"version": FORMAT_VERSION, "revision": revision, "entries": saved}
        self._io.write_file_atomic(path, json.dumps(body).encode())

    def _publish(self, event: WatchEvent) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].revision
        self._history.append(event)
        for prefix, queue in self._watchers:
            if event.key.startswith(prefix):
                queue.put_nowait(event)

    # -- leases -------------------------------------------------------------------

    async def grant_lease(self, ttl_ms: int, *, keepalive: bool = True) -> Lease:
        self._check_open()
        if ttl_ms <= 0:
            raise MetadataStoreError(f"a lease needs a positive time to live, got {ttl_ms} ms")
        lease = Lease(next(self._lease_ids), ttl_ms)
        deadline = None if keepalive else time.monotonic() + ttl_ms / 1000
        self._leases[lease.id] = (lease, deadline)
        return lease

    async def revoke_lease(self, lease: Lease) -> None:
        self._check_open()
        await self._end_lease(lease.id)

    async def _end_lease(self, lease_id: int) -> None:
        self._leases.pop(lease_id, None)
        doomed: list[Operation] = [
            Delete(k) for k, e in self._entries.items() if e.lease == lease_id
        ]
        if doomed:
            await self._persist(self._apply(doomed))

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            for lease, deadline in list(self._leases.values()):
                if deadline is not None and now >= deadline:
                    lease.lost.set()
                    try:
                        await self._end_lease(lease.id)
                    except MetadataStoreError:  # the next commit writes the file again
                        continue

    # -- watches ------------------------------------------------------------------

    async def watch(self, prefix: str, after_revision: int) -> AsyncGenerator[WatchEvent, None]:
        self._check_open()
        if after_revision < self._compacted:
            raise CompactedError(
                f"changes after revision {after_revision} are gone (kept from {self._compacted})"
            )
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        watcher = (prefix, queue)
        # history and registration together, with no await between: no gap, no repeat
        past = [
            e for e in self._history if e.revision > after_revision and e.key.startswith(prefix)
        ]
        self._watchers.append(watcher)
        try:
            for event in past:
                yield event
            while True:
                yield await queue.get()
        finally:
            self._watchers.remove(watcher)

    def _check_open(self) -> None:
        if not self._open:
            raise MetadataStoreError("the metadata store is closed")

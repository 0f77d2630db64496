"""Client quotas on a broker: the cached configuration, the buckets, the throttle times.

The quotas live in the metadata store under ``/quotas/`` (one key per entity,
:mod:`mq.quotas.entities`); every broker loads them at start and follows them
with a watch, so a change made through any broker applies on all of them
within the watch's latency (milliseconds with etcd, the file store's poll
with the embedded store). Writes go straight to the store with
compare-and-swap per entity (no controller needed: an entity's quotas are
one key).

Enforcement (Kafka's, KIP-13/124/219): the connection asks
:meth:`QuotaManager.charge` after each request what it cost its client —
bytes produced, bytes fetched, seconds of the event loop — each recorded in
the client's bucket (:class:`~mq.quotas.buckets.ThrottleBucket`) for the
entity that applies (KIP-257's order); the answer is the longest throttle
time, at most ``quota_max_throttle_ms``. The broker still serves the request,
tells the client (``throttle_time_ms``) and stops reading its connection for
that long. Brokers' own connections are never throttled.

Bounds: buckets are kept per (user, client id) seen; past
:data:`MAX_BUCKETS` the ones with no debt are dropped (a dropped bucket comes
back full, which is what an idle client's bucket is anyway).

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

import msgpack

from mq.errors import InvalidRequestError, MQError
from mq.quotas import entities as q
from mq.quotas.buckets import ThrottleBucket
from mq.quotas.entities import BucketKey, Entity
from mq.replication.store import (
    CompactedError,
    Compare,
    Delete,
    EventKind,
    MetadataStore,
    Put,
    WatchEvent,
)
from mq.wire.apis_quotas import MAX_QUOTA_ENTRIES

if TYPE_CHECKING:
    from mq.broker.config import BrokerConfig

log = logging.getLogger(__name__)

MAX_BUCKETS: Final = 100_000
"""Buckets kept at once (one per quota key and client that has used one): ~200 B each."""
MAX_RESOLVED: Final = 100_000
"""(user, client id) pairs whose applicable quotas are remembered between changes."""
RETRY_S: Final = 1.0
"""Pause before the watch of the quotas is started again after a store error."""
MAX_ENTITIES: Final = MAX_QUOTA_ENTRIES
"""Entities with quotas in the cluster: a describe of them all fits one response (the
wire's bound); a new entity past it is refused (far more than any deployment names)."""
ALTER_ATTEMPTS: Final = 10
"""Read-modify-write attempts of one entity's quotas against concurrent writers."""

Resolved = dict[str, ThrottleBucket]
"""Quota key → the bucket it is charged to, for one client: only the keys some entity
sets (buckets of a shared entity are shared; the rate is set at resolution)."""


def pack_values(values: Mapping[str, float]) -> bytes:
    return msgpack.packb({k: int(v) for k, v in sorted(values.items())})


def unpack_values(raw: bytes) -> dict[str, float]:
    values = msgpack.unpackb(raw)
    if not isinstance(values, dict):
        raise ValueError("quota values must be a map")
    return {str(k): float(v) for k, v in values.items() if k in q.QUOTA_KEYS}


class QuotaManager:
    """The quotas this broker enforces (see the module docstring)."""

    def __init__(self, store: MetadataStore, config: BrokerConfig) -> None:
        self._store = store
        self.burst_s = config.quota_burst_ms / 1000
        self.max_throttle_s = config.quota_max_throttle_ms / 1000
        self.quotas: dict[Entity, dict[str, float]] = {}
        self.revision = 0
        self.generation = 0
        """Bumped whenever a resolution may change (the quotas changed, buckets were
        dropped): a connection's cached resolution (:class:`~mq.broker.throttling.ClientQuotas`)
        is good while this is unchanged."""
        self._resolved: dict[tuple[str, str | None], Resolved] = {}
        self._buckets: dict[tuple[str, BucketKey], ThrottleBucket] = {}
        self._watch: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()
        """Set (and cleared) after each applied change; tests wait on it."""

    # -- the configuration ------------------------------------------------------------

    async def start(self) -> None:
        await self._load()
        self._watch = asyncio.get_running_loop().create_task(self._follow(), name="quota-watch")

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch

    async def _load(self) -> None:
        entries, revision = await self._store.get_prefix(q.STORE_PREFIX)
        quotas: dict[Entity, dict[str, float]] = {}
        for entry in entries:
            parsed = self._parse(entry.key, entry.value)
            if parsed is not None:
                quotas[parsed[0]] = parsed[1]
        self._replace(quotas, revision)

    async def _follow(self) -> None:
        while True:
            try:
                async with contextlib.aclosing(
                    self._store.watch(q.STORE_PREFIX, self.revision)
                ) as events:
                    async for event in events:
                        self.apply(event)
            except CompactedError:
                log.warning("the quota watch fell behind; reloading the quotas")
            except MQError as exc:
                log.warning("quota watch: %s", exc)
                await asyncio.sleep(RETRY_S)
            try:
                await self._load()
            except MQError as exc:
                log.warning("reloading the quotas: %s", exc)
                await asyncio.sleep(RETRY_S)

    def apply(self, event: WatchEvent) -> None:
        """One change of the store's quotas."""
        quotas = dict(self.quotas)
        if event.kind is EventKind.PUT:
            parsed = self._parse(event.key, event.value)
            if parsed is None:
                return
            quotas[parsed[0]] = parsed[1]
        else:
            try:
                quotas.pop(q.entity_of_key(event.key), None)
            except ValueError:
                return
        self._replace(quotas, max(self.revision, event.revision))

    @staticmethod
    def _parse(key: str, raw: bytes) -> tuple[Entity, dict[str, float]] | None:
        try:
            return q.entity_of_key(key), unpack_values(raw)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            log.warning("ignoring the malformed quota entry %s: %s", key, exc)
            return None

    def _replace(self, quotas: dict[Entity, dict[str, float]], revision: int) -> None:
        self.quotas = quotas
        self.revision = revision
        self._resolved.clear()
        self.generation += 1
        self.changed.set()
        self.changed.clear()

    # -- enforcement ----------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether any quota is configured (else :meth:`charge` is never needed)."""
        return bool(self.quotas)

    def resolved(self, principal: str, client_id: str | None, now: float) -> Resolved:
        """The buckets of the quotas that apply to a client (cached until the
        configuration changes)."""
        found = self._resolved.get((principal, client_id))
        if found is None:
            user = q.user_of(principal)
            found = {}
            for key in q.QUOTA_KEYS:
                match = q.resolve(self.quotas, user, client_id or "", key)
                if match is not None:
                    found[key] = self._bucket(key, *match, now)
            if len(self._resolved) >= MAX_RESOLVED:
                self._resolved.clear()
            self._resolved[(principal, client_id)] = found
        return found

    def _bucket(self, key: str, bucket_key: BucketKey, rate: float, now: float) -> ThrottleBucket:
        if key == q.REQUEST_PERCENTAGE:
            rate = rate / 100  # seconds of the loop per second
        bucket = self._buckets.get((key, bucket_key))
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._prune(now)
            bucket = self._buckets[(key, bucket_key)] = ThrottleBucket(rate, now, self.burst_s)
        elif bucket.rate != rate:
            bucket.set_rate(rate, now)
        return bucket

    def charge(self, resolved: Resolved, key: str, amount: float, now: float) -> float:
        """Record ``amount`` of ``key`` for a client; the seconds it must now wait."""
        bucket = resolved.get(key)
        if bucket is None:
            return 0.0
        wait = bucket.record(amount, now)
        return wait if wait < self.max_throttle_s else self.max_throttle_s

    def _prune(self, now: float) -> None:
        """Drop the buckets out of debt (and the resolutions holding them: a client
        resolved again shares its new bucket with the others of its entity)."""
        self._buckets = {k: b for k, b in self._buckets.items() if b.throttle_s(now) > 0}
        self._resolved.clear()
        self.generation += 1

    # -- reads and writes for the APIs -----------------------------------------------------

    def describe(
        self, components: Sequence[tuple[str, int, str | None]], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        return [
            (ent, values)
            for ent, values in sorted(self.quotas.items(), key=lambda kv: q.store_key(kv[0]))
            if values and q.matches(ent, components, strict)
        ]

    async def alter(
        self, ent: Entity, ops: list[tuple[str, float | None]], *, validate_only: bool
    ) -> None:
        """Set (value) or remove (None) quota keys of one entity, atomically."""
        for key, value in ops:
            try:
                if value is None:
                    if key not in q.QUOTA_KEYS:
                        raise ValueError(f"unknown quota {key!r}")
                else:
                    q.check_value(key, value)
            except ValueError as exc:
                raise InvalidRequestError(str(exc)) from None
        if len({key for key, _ in ops}) != len(ops):
            raise InvalidRequestError("a quota key is changed twice for one entity")
        adds = any(value is not None for _, value in ops)
        if adds and ent not in self.quotas and len(self.quotas) >= MAX_ENTITIES:
            raise InvalidRequestError(
                f"{MAX_ENTITIES} entities have quotas already (the most a describe "
                "returns): remove some first"
            )
        if validate_only:
            return
        store_key = q.store_key(ent)
        for _ in range(ALTER_ATTEMPTS):
            entry = await self._store.get(store_key)
            values = unpack_values(entry.value) if entry is not None else {}
            for key, value in ops:
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            compare = Compare(store_key, entry.mod_revision if entry is not None else 0)
            op = Put(store_key, pack_values(values)) if values else Delete(store_key)
            if await self._store.commit([compare], [op]) is not None:
                return
        raise MQError(f"{q.describe(ent)}: the quotas kept changing under this write; retry")

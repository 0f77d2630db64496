"""Share groups on the broker: the leader of a partition keeps each group's share state.

:mod:`mq.queues.share_partition` holds the rules; this module feeds them the
partition's records, the clock and the consumers' requests, and makes the
outcome durable:

* a *session* is one share partition (group, topic, partition) led here. It is
  loaded on first use from ``__share_state`` (:mod:`mq.broker.share_store`),
  which first fences the saves of earlier leader epochs off, and dropped when this
  broker stops leading the partition (the new leader loads the state saved so far)
  or a save of it is refused as fenced (a later leader loaded it);
* receives and settlements change the state in memory, then wait until a save
  covering the change is acknowledged (acks=all) before they answer. One save
  per session is in flight at a time; the changes made meanwhile go into the
  next one, so saves batch themselves under load;
* a ticker ends expired leases, makes delayed records visible, wakes long
  polls, saves what changed by itself and copies dead letters to the topic's
  dead-letter queue (with ``mq.dlq.*`` headers saying where they came from);
* loaded sessions are bounded (:mod:`mq.broker.share_sessions`): at most
  ``max_share_sessions`` on the broker and ``max_share_groups_per_partition`` on one
  partition. A session unused for ``share_session_idle_ms`` is evicted by the ticker,
  and the least recently used one to make room for a new one, but only once its state
  is saved and nothing waits on it (no long poll, save, or dead letter in progress):
  its next use reloads it from ``__share_state``. With none evictable, the load fails
  with a retriable SHARE_SESSION_LIMIT_REACHED.

A new share group starts at the log start (a queue delivers what was sent
before its first consumer came). Records are read into a session's window
as receives need them; consumers never see records above the high watermark.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from mq.broker import dead_letters
from mq.broker.dead_letters import log_records
from mq.broker.queue_limits import ReceiveRates
from mq.broker.share_sessions import PRESSURE_MIN_IDLE_S, SessionLimits, SessionTable
from mq.broker.share_store import ShareKey, ShareStateStore
from mq.errors import (
    CoordinatorLoadInProgressError,
    FencedLeaderEpochError,
    MQError,
    NotLeaderOrFollowerError,
    ShareSessionLimitReachedError,
)
from mq.queues.config import dead_letter_queue, share_config
from mq.queues.share_partition import (
    Acquired,
    Attributes,
    Filter,
    ShareConfig,
    SharePartition,
)
from mq.records.batch import split_batches

if TYPE_CHECKING:
    from mq.broker.broker import Broker
    from mq.broker.partition import Partition

log = logging.getLogger(__name__)
TICK_S = 0.05
"""How often leases and delays are checked: the resolution of a visibility timeout."""
FILL_BYTES = 4 << 20
"""Most bytes read into a window per receive: a receive does not stall the loop."""
FILL_READ_BYTES = 1 << 20
"""Most bytes per log read while filling a window (at least one whole batch)."""
FILL_READ_BYTES_PER_MESSAGE = 1 << 10
"""A receive of N messages reads N KiB per log read (at least
:data:`MIN_FILL_READ_BYTES`, at most :data:`FILL_READ_BYTES`), and stops reading once
it has what it wants: a receive of one small message adds a few hundred records to
the window, not the ~10,000 a 1 MiB read held (each costs the window ~300 B: a share
group named once on a large queue kept ~12 MB), while large receives keep large reads."""
MIN_FILL_READ_BYTES = 64 << 10
"""Smallest log read while filling a window (one read's overhead stays small)."""
DEDUP_LOOKBACK_BYTES = 64 << 20
"""At most this much of the log below a restored window is read to relearn dedup ids."""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class Session:
    key: ShareKey
    share: SharePartition
    partition: Partition
    topic_id: str
    epoch: int
    dead_letter_queue: str | None
    configs: dict[str, str] = field(default_factory=dict)
    saved: int = 0
    closed: bool = False
    saving: asyncio.Task[None] | None = None
    dead_lettering: asyncio.Task[None] | None = None
    durable: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    waiters: set[asyncio.Future[None]] = field(default_factory=set)

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def wait(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.add(waiter)
        return waiter


class ShareManager:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        config = broker.config
        self.store = ShareStateStore(broker, config.share_fence_entries)
        self.receive_rates = ReceiveRates()
        self.limits = SessionLimits(
            config.max_share_sessions,
            config.max_share_groups_per_partition,
            max(config.share_session_idle_ms / 1000, PRESSURE_MIN_IDLE_S),
        )
        self._sessions: SessionTable[Session] = SessionTable()
        self.evicted = 0
        """Share partitions evicted so far (idle, or to make room)."""
        self._loading: dict[ShareKey, asyncio.Task[Session]] = {}
        self._ticker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for task in self._loading.values():
            task.cancel()
        saving = [s.saving for s in self._sessions.values() if s.saving is not None]
        if saving:
            await asyncio.wait(saving, timeout=2.0)
        for session in list(self._sessions.values()):
            self._close(session)

    # -- sessions -------------------------------------------------------------------------

    async def session(self, group: str, topic: str, index: int) -> Session:
        """The share partition, loaded if this broker leads the partition (raises otherwise)."""
        key = ShareKey(group, topic, index)
        partition = self._broker.leader_partition(topic, index)
        found = self._sessions.get(key)
        if found is not None and not found.closed:
            if found.epoch == partition.leader_epoch:
                self._reconfigure(found)
                self._sessions.touch(key, time.monotonic())
                return found
            self._close(found)
        loading = self._loading.get(key)
        if loading is None:
            self._make_room(key)
            loading = asyncio.get_running_loop().create_task(self._load(key, partition))
            self._loading[key] = loading
            loading.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(loading)

    async def _load(self, key: ShareKey, partition: Partition) -> Session:
        broker = self._broker
        topic = await broker.topics.catch_up_on(key.topic)
        if topic is None:
            raise NotLeaderOrFollowerError(f"topic {key.topic} is gone")
        epoch = partition.leader_epoch
        await self.store.ensure_topic()
        saved = await self.store.load(key, topic.topic_id, epoch)
        config = share_config(topic.configs)
        if saved is not None:
            share = SharePartition.restore(config, saved)
            await self._seed_dedup(share, partition)
        else:
            share = SharePartition(config, partition.log.log_start_offset)
        if not partition.is_leader or partition.leader_epoch != epoch:
            raise NotLeaderOrFollowerError(f"{partition.name}: leadership moved while loading")
        session = Session(
            key,
            share,
            partition,
            topic.topic_id,
            epoch,
            dead_letter_queue(topic.configs),
            dict(topic.configs),
        )
        session.saved = share.version
        if share.restoring:
            self._fill(session, 0)  # apply the saved state; a new group reads as receives need
        self._sessions.put(key, session, time.monotonic())
        log.info(
            "share group %s on %s: loaded at offset %d (%s)",
            key.group,
            partition.name,
            share.start,
            "saved state" if saved else "new",
        )
        return session

    async def _seed_dedup(self, share: SharePartition, partition: Partition) -> None:
        """Relearn the dedup ids of the records sent in the window before the restored start."""
        log_ = partition.log
        start = max(share.start, log_.log_start_offset)
        first = partition.read(start, 1) if start < partition.high_watermark else None
        if first is None:
            return
        timestamps = [h.max_timestamp for h, _ in split_batches(first.data)][:1]
        found = log_.offset_for_timestamp(timestamps[0] - share.config.dedup_window_ms)
        offset = found[0] if found is not None else start
        read = 0
        while offset < start and read < DEDUP_LOOKBACK_BYTES:
            chunk = partition.read(offset, 1 << 20)
            if chunk is None:
                break
            share.seed_dedup(log_records(chunk.data))
            read += len(chunk.data)
            offset = chunk.next_offset
            await asyncio.sleep(0)

    def _reconfigure(self, session: Session) -> None:
        topic = self._broker.topic(session.key.topic)
        if topic is None or topic.configs == session.configs:
            return
        session.configs = dict(topic.configs)
        try:
            config = share_config(topic.configs)
        except MQError:
            return
        if config.fifo != session.share.config.fifo:
            # The FIFO indexes are built as records are read: switching modes under a
            # loaded window breaks acquire/expire. It applies when the session next loads.
            log.warning(
                "share group %s: queue.fifo changes when the share partition next loads",
                session.key,
            )
            config = replace(config, fifo=session.share.config.fifo)
        if config != session.share.config:
            session.share.config = config
            session.dead_letter_queue = dead_letter_queue(topic.configs)

    def partition_changed(self, partition: Partition) -> None:
        """A partition here changed role: drop the sessions it no longer backs."""
        for session in [s for s in self._sessions.values() if s.partition is partition]:
            if not partition.is_leader or partition.leader_epoch != session.epoch:
                self._close(session)

    def forget_topic(self, topic: str) -> None:
        for session in [s for s in self._sessions.values() if s.key.topic == topic]:
            self._close(session)

    def _make_room(self, key: ShareKey) -> None:
        """Before loading ``key``: evict the least recently used evictable session if a
        bound is reached (on ``key``'s partition first), else raise."""
        limits, now = self.limits, time.monotonic()
        slot = (key.topic, key.partition)
        loading_here = sum(1 for k in self._loading if (k.topic, k.partition) == slot)
        if self._sessions.on_partition(*slot) + loading_here >= limits.per_partition:
            victim = self._sessions.victim(now, self._evictable, slot)
            if victim is None:
                raise ShareSessionLimitReachedError(
                    f"{key.topic}-{key.partition} has {limits.per_partition} share groups "
                    f"loaded, all in use (max_share_groups_per_partition); retry later"
                )
            self._evict(victim, "to make room on its partition")
        if len(self._sessions) + len(self._loading) >= limits.per_broker:
            victim = self._sessions.victim(now, self._evictable)
            if victim is None:
                raise ShareSessionLimitReachedError(
                    f"this broker has {limits.per_broker} share partitions loaded, all in use "
                    f"(max_share_sessions); retry later"
                )
            self._evict(victim, "to make room")

    @staticmethod
    def _evictable(session: Session) -> bool:
        """Saved, and nothing waits on it: dropping it loses nothing (it reloads)."""
        return (
            not session.closed
            and session.saving is None
            and session.saved >= session.share.version
            and not session.waiters
            and not session.durable
            and session.dead_lettering is None
            and not session.share.has_dead_letters
        )

    def _evict(self, session: Session, why: str) -> None:
        self._close(session)
        self.evicted += 1
        log.info("share group %s on %s: evicted %s", session.key.group, session.partition.name, why)

    def _evict_idle(self, now: float) -> None:
        for session in self._sessions.idle(now, self.limits.idle_s):
            if self._evictable(session):
                self._evict(session, "(idle)")

    def _close(self, session: Session) -> None:
        session.closed = True
        self.receive_rates.forget(session.key)
        if self._sessions.get(session.key) is session:
            self._sessions.remove(session.key)
        session.wake()
        for _, waiter in session.durable:
            if not waiter.done():
                waiter.set_exception(
                    NotLeaderOrFollowerError(f"{session.partition.name}: leadership moved")
                )
        session.durable.clear()
        if session.dead_lettering is not None:
            session.dead_lettering.cancel()

    # -- reading records into a window ----------------------------------------------------

    def _fill(self, session: Session, want: int) -> None:
        """Read records until ``want`` may be visible, the window is full or the log ends."""
        share, partition = session.share, session.partition
        now = now_ms()
        log_start = partition.log.log_start_offset
        if share.end < log_start or share.start < log_start:
            share.truncate_below(log_start, now)
        read = 0
        chunk = FILL_READ_BYTES
        if want and not share.restoring:
            chunk = max(MIN_FILL_READ_BYTES, want * FILL_READ_BYTES_PER_MESSAGE)
            chunk = min(FILL_READ_BYTES, chunk)
        while share.wants_records and share.end < partition.high_watermark and read < FILL_BYTES:
            if not share.restoring and want and share.ready_count >= want:
                break
            found = partition.read(share.end, chunk)
            if found is None:
                break
            share.add(log_records(found.data), found.next_offset, now)
            read += len(found.data)
        if share.restoring and share.end >= partition.log.next_offset:
            share.forget_restored()  # the saved state names records this log no longer has

    # -- receive --------------------------------------------------------------------------

    def acquire(
        self,
        session: Session,
        max_messages: int,
        lease_ms: int | None,
        wanted: Filter | None,
        max_bytes: int,
    ) -> list[Acquired]:
        partition = session.partition
        if session.closed or not partition.is_leader or partition.leader_epoch != session.epoch:
            raise NotLeaderOrFollowerError(f"{partition.name}: leadership moved")
        self._sessions.touch(session.key, time.monotonic())
        now = time.monotonic()
        allowed = self.receive_rates.allowance(session.key, session.configs, now)
        if allowed is not None:  # queue.receive.max.per.sec (issue 20)
            max_messages = min(max_messages, allowed)
            if not max_messages:
                return []
        self._fill(session, max_messages)
        share = session.share
        lease = lease_ms if lease_ms is not None else share.config.visibility_ms
        got = share.acquire(now_ms(), max_messages, lease, wanted, max_bytes)
        if allowed is not None:
            self.receive_rates.took(session.key, len(got), now)
        return got

    def records_of(self, session: Session, acquired: list[Acquired]) -> bytes:
        """The batches holding the acquired offsets (each batch once)."""
        chunks: list[bytes] = []
        covered = -1
        for item in acquired:
            if item.offset < covered:
                continue
            found = session.partition.read(item.offset, 1)
            if found is None:
                break
            chunks.append(bytes(found.data))
            covered = found.next_offset
        return b"".join(chunks)

    def wait_for_visible(self, sessions: Iterable[Session]) -> list[asyncio.Future[None]]:
        """Futures that complete when any of ``sessions`` may have something to lease."""
        waiters: list[asyncio.Future[None]] = []
        loop = asyncio.get_running_loop()
        for session in sessions:
            waiters.append(session.wait())
            if session.partition.is_leader:
                waiters.append(session.partition.wait_for_data())
            refill = self.receive_rates.wait_s(session.key, time.monotonic())
            if refill is not None:  # held back by its receive rate: until it has a message
                waiter: asyncio.Future[None] = loop.create_future()
                loop.call_later(refill, _resolve, waiter)
                waiters.append(waiter)
        return waiters

    # -- settle ---------------------------------------------------------------------------

    async def ready(self, session: Session) -> None:
        """Make sure every record a receipt may name is in the window (after a restore);
        while the high watermark is still below them, the caller should retry."""
        if session.share.restoring:
            self._fill(session, 0)
        if session.share.restoring:
            raise CoordinatorLoadInProgressError(
                f"{session.partition.name}: the share state is still loading"
            )

    def after_change(self, session: Session) -> None:
        """Something may be visible again, or dead letters wait: act on it."""
        if session.share.has_visible(now_ms()):
            session.wake()
        if session.dead_letter_queue and session.share.pending_dead_letters():
            self._kick_dead_letters(session)

    # -- durability -----------------------------------------------------------------------

    async def durable(self, session: Session) -> None:
        """Return once the session's state as of now is saved (acks=all)."""
        target = session.share.version
        if session.saved >= target:
            return
        if session.closed:
            raise NotLeaderOrFollowerError(f"{session.partition.name}: leadership moved")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        session.durable.append((target, waiter))
        self._kick_save(session)
        await waiter

    def _kick_save(self, session: Session) -> None:
        if session.saving is None and not session.closed:
            session.saving = asyncio.get_running_loop().create_task(self._save_loop(session))

    async def _save_loop(self, session: Session) -> None:
        share = session.share
        try:
            while session.saved < share.version and not session.closed:
                version = share.version
                try:
                    await self.store.save(
                        session.key, session.topic_id, session.epoch, share.snapshot()
                    )
                except MQError as exc:
                    log.warning("saving share state of %s failed: %s", session.key, exc)
                    self._settle_waiters(session, version, exc)
                    if isinstance(exc, FencedLeaderEpochError):
                        self._close(session)  # a later leader took over: serve nothing more
                    return
                session.saved = version
                self._settle_waiters(session, version, None)
        finally:
            session.saving = None

    @staticmethod
    def _settle_waiters(session: Session, version: int, error: MQError | None) -> None:
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for target, waiter in session.durable:
            if waiter.done():
                continue
            if error is not None:
                waiter.set_exception(type(error)(error.message))
            elif target <= version:
                waiter.set_result(None)
            else:
                keep.append((target, waiter))
        session.durable = keep

    # -- dead letters ---------------------------------------------------------------------

    def _kick_dead_letters(self, session: Session) -> None:
        if session.dead_lettering is None and not session.closed:
            copying = dead_letters.copy(self._broker, session, self._kick_save)
            task = asyncio.get_running_loop().create_task(copying)
            session.dead_lettering = task

    # -- the ticker -----------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self._evict_idle(time.monotonic())
            now = now_ms()
            for session in self._sessions.values():
                try:
                    self._tick(session, now)
                except MQError as exc:
                    log.warning("share group %s: %s", session.key, exc)
                except Exception:  # one broken session must not stop every lease expiring
                    log.exception("share group %s: tick failed", session.key)

    def _tick(self, session: Session, now: int) -> None:
        share = session.share
        share.expire(now)
        if session.waiters and share.has_visible(now):
            session.wake()
        if share.pending_dead_letters():
            if session.dead_letter_queue:
                self._kick_dead_letters(session)
            else:
                share.drop_dead_letters()  # the queue's dead-letter queue was unset
        if session.saved < share.version:
            self._kick_save(session)

    # -- attributes -----------------------------------------------------------------------

    def loaded(self) -> list[Session]:
        """The share partitions loaded here (what the queue metrics read, at scrape time)."""
        return self._sessions.values()

    def attributes(self, session: Session) -> tuple[Attributes, int]:
        """The share partition's counts, and the records past its window (unread backlog)."""
        self._fill(session, 0)
        share = session.share
        backlog = max(0, session.partition.high_watermark - share.end)
        return share.attributes(now_ms()), backlog


__all__ = ["Session", "ShareConfig", "ShareManager"]


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)

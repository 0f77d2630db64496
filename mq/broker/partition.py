"""A hosted partition: its log, its writer task, its role, its high watermark, its waiters.

The third storage layer (Segment → Log → Partition): what the broker adds to a
log. The metadata store says who leads (:meth:`Partition.apply_state`):

* **leader**: takes producers' appends in its leader epoch and serves
  consumers below the high watermark, which a
  :class:`~mq.replication.tracker.ReplicaTracker` moves as followers fetch
  (with no follower in the ISR it is the log end as soon as an append has met
  its flush policy). acks=all appends complete when the high watermark covers
  them (:meth:`append`);
* **follower**: appends what a replica fetcher brings from the leader, with the
  leader's offsets, and serves no client;
* **offline**: no live replica may lead, or this replica's log is offline (a
  write or sync failed: :meth:`Partition._log_failed`); it serves nothing. A
  replica whose log is offline neither leads nor follows until the broker
  restarts and recovers it from its files; it leaves the ISR (the broker's
  :attr:`Partition.on_offline` handler) so that another replica is elected.

Long polls: a fetch that wants more data than there is waits on
:meth:`Partition.wait_for_data`, which every append and high-watermark move wakes.

Thread safety: one event loop; every method is called from it.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path

from mq.errors import (
    CorruptDataError,
    CorruptRecordError,
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    StorageError,
    UnknownLeaderEpochError,
)
from mq.logs import partition_extra
from mq.records.encryption import Keyring
from mq.replication.placement import PartitionState
from mq.replication.tracker import ReplicaTracker
from mq.storage.checkpoint import read_high_watermark, write_high_watermark
from mq.storage.config import LogConfig
from mq.storage.fileio import FileIO
from mq.storage.log import AppendInfo, Log
from mq.storage.scrub import SegmentDamage
from mq.storage.segment import Slice
from mq.storage.writer import THREAD_WRITE_BYTES, LogWriter

log = logging.getLogger(__name__)


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


_sequence = itertools.count()


def now_ms() -> float:
    return time.monotonic() * 1000


class Partition:
    """One topic-partition this broker holds a replica of."""

    def __init__(
        self,
        topic: str,
        index: int,
        log: Log,
        node_id: int = 0,
        checkpointed: int | None = None,
        thread_write_bytes: int = THREAD_WRITE_BYTES,
        contended: Callable[[], bool] = lambda: True,
    ) -> None:
        """``checkpointed``: the high watermark checkpoint read already (in the thread that
        opened ``log``: no file is read here then); None reads it. ``thread_write_bytes``,
        ``contended``: when appends are written in a thread (:class:`LogWriter`)."""
        self.topic = topic
        self.index = index
        self.log = log
        self.node_id = node_id
        self.role = Role.OFFLINE
        self.state: PartitionState | None = None
        self.state_revision = -1
        """Revision of the metadata-store write :attr:`state` comes from."""
        self.leader_epoch = 0
        self.min_insync_replicas = 1
        self.local_end = log.next_offset
        """The log end as far as acknowledgements go (appends that met the flush policy)."""
        if checkpointed is None:
            checkpointed = read_high_watermark(log.directory) or 0
        self.high_watermark = max(log.log_start_offset, min(checkpointed, log.next_offset))
        """Consumers read below it. A replica learns it from its leader, or as leader
        from its followers' fetches; it starts at its checkpoint (capped by the log end)
        and catches up at the first round."""
        self.checkpointed_high_watermark = self.high_watermark
        """The high watermark last written to the checkpoint (or read from it)."""
        self.tracker: ReplicaTracker | None = None
        self.damage: SegmentDamage | None = None
        """Damage the scrubber found in this replica's log, until it is repaired."""
        self.unrepairable = False
        """Whether no in-sync replica had a healthy copy of :attr:`damage`: reads of it
        fail with CORRUPT_DATA (not retriable) until an operator repairs the log."""
        self.repairing = False
        """While set, no replica fetcher takes this partition (its repair truncates it)."""
        self.on_corrupt: Callable[[Partition, int, CorruptRecordError], None] | None = None
        """Told when a read meets a damaged batch (the broker's scrubber)."""
        self.on_isr_change: Callable[[int, int], None] | None = None
        """Told (ISR size before, after) when the ISR of a partition led here changes
        within a leader epoch (written by this leader or by the controller)."""
        self.on_offline: Callable[[Partition], None] | None = None
        """Told (on the event loop, once) when a failed write or sync took the log
        offline: the broker hands leadership on and leaves the ISR."""
        self._waiters: set[asyncio.Future[None]] = set()
        self._acks: list[tuple[int, int, asyncio.Future[AppendInfo], AppendInfo]] = []
        """acks=all appends waiting for the high watermark: (last offset, seq, future, info)."""
        self.writer = LogWriter(
            log,
            on_append=self._appended,
            thread_write_bytes=thread_write_bytes,
            contended=contended,
        )

    @classmethod
    def open(
        cls,
        data_dir: Path,
        topic: str,
        index: int,
        config: LogConfig,
        node_id: int = 0,
        keyring: Keyring | None = None,
    ) -> Partition:
        directory = data_dir / f"{topic}-{index}"
        return cls(topic, index, Log.open(directory, config, keyring=keyring), node_id)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def isr(self) -> frozenset[int]:
        return self.tracker.isr if self.tracker is not None else frozenset()

    @property
    def offline(self) -> StorageError | None:
        """The error that took this replica's log offline (until a restart), or None."""
        return self.log.offline

    def start(self) -> None:
        loop = asyncio.get_running_loop()

        def failed(exc: StorageError) -> None:
            # Log.fail may run in a worker thread (a read, a sync job): back to the loop
            if not loop.is_closed():  # a close failing at shutdown: nobody to tell
                loop.call_soon_threadsafe(self._log_failed, exc)

        self.log.on_offline = failed
        self.writer.start()

    def _log_failed(self, exc: StorageError) -> None:
        """The log went offline: stop leading and following, and tell the broker."""
        log.error(
            "%s: the replica on broker %d is offline (%s): it stops leading and following "
            "and leaves the ISR; it comes back when the broker restarts",
            self.name,
            self.node_id,
            exc,
            extra=partition_extra(self.topic, self.index),
        )
        self._step_down(Role.OFFLINE)
        if self.on_offline is not None:
            self.on_offline(self)

    # -- roles ------------------------------------------------------------------------

    def apply_state(self, state: PartitionState, revision: int) -> bool:
        """Take the role ``state`` gives this node; False if ``revision`` is not newer."""
        if revision <= self.state_revision:
            return False
        self.state, self.state_revision = state, revision
        if self.log.offline is not None:
            self._step_down(Role.OFFLINE)  # neither leads nor follows until a restart
            self.leader_epoch = state.leader_epoch
            return True
        if state.leader == self.node_id:
            if self.role is not Role.LEADER or self.leader_epoch != state.leader_epoch:
                log.info(
                    "%s: leading in epoch %d, ISR %s", self.name, state.leader_epoch, state.isr
                )
                self._lead(state)
            else:
                assert self.tracker is not None
                if self.on_isr_change is not None and len(state.isr) != len(self.isr):
                    self.on_isr_change(len(self.isr), len(state.isr))
                if self.tracker.set_isr(state.isr, state.replicas, now_ms()):
                    self._high_watermark_moved()
        else:
            role = Role.FOLLOWER if state.leader >= 0 else Role.OFFLINE
            if role is not self.role or self.leader_epoch != state.leader_epoch:
                log.info(
                    "%s: %s in epoch %d (leader %d)",
                    self.name,
                    role.value,
                    state.leader_epoch,
                    state.leader,
                )
            self._step_down(role)
            self.leader_epoch = state.leader_epoch
        return True

    def fence(self) -> bool:
        """Stop leading (a restarted broker, or one that lost its session): offline until
        a newer state comes; whether the role changed."""
        if self.role is not Role.LEADER:
            return False
        log.warning("%s: fenced in epoch %d, until elected again", self.name, self.leader_epoch)
        self._step_down(Role.OFFLINE)
        return True

    def _lead(self, state: PartitionState) -> None:
        self._step_down(Role.LEADER)
        self.leader_epoch = state.leader_epoch
        if state.leader_epoch > self.log.epochs.latest_epoch:
            epoch = state.leader_epoch
            # its file is replaced in a worker thread, before any append of the epoch
            self.writer_call_nowait(lambda log_: log_.begin_epoch(epoch), in_thread=True)
        self.tracker = ReplicaTracker(
            self.node_id,
            state.replicas,
            state.isr,
            leader_end=self.local_end,
            high_watermark=self.high_watermark,
            epoch_start=self.local_end,
            now_ms=now_ms(),
        )
        self.high_watermark = self.tracker.high_watermark
        self._wake()

    def _step_down(self, role: Role) -> None:
        """Leave the leader role (if held): pending acks=all fail, the client retries."""
        self.role = role
        self.tracker = None
        acks, self._acks = self._acks, []
        for *_, future, _info in acks:
            if not future.done():
                future.set_exception(
                    NotLeaderOrFollowerError(f"{self.name}: leadership moved before the ack")
                )
        self._wake()

    def writer_call_nowait(self, fn: Callable[[Log], object], *, in_thread: bool = False) -> None:
        """Queue ``fn(log)`` in the writer's order without waiting for it (``in_thread``:
        it does blocking file I/O, see :meth:`~mq.storage.writer.LogWriter.submit_call`)."""
        future = self.writer.submit_call(fn, in_thread=in_thread)
        future.add_done_callback(_retrieve)

    def require_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise unless this replica leads (in ``current_leader_epoch`` when one is given).

        STORAGE_ERROR (retriable; clients refresh metadata) while the log is offline.
        """
        failed = self.log.offline
        if failed is not None:
            raise StorageError(
                f"{self.name} is offline on broker {self.node_id} ({failed}); another "
                "in-sync replica takes over: refresh metadata"
            )
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"this broker does not lead {self.name}")
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            if current_leader_epoch < self.leader_epoch:
                raise FencedLeaderEpochError(
                    f"{self.name}: epoch {current_leader_epoch} is older than "
                    f"the leader's {self.leader_epoch}"
                )
            raise UnknownLeaderEpochError(
                f"{self.name}: epoch {current_leader_epoch} is newer than this leader's "
                f"{self.leader_epoch}"
            )

    def require_caught_up(self) -> None:
        """Raise OffsetNotAvailableError while, as leader, the high watermark is below the
        log end this leader had when it took its epoch: until then it does not know where
        the acknowledged data ends (as Kafka's ListOffsets)."""
        if self.tracker is not None and self.high_watermark < self.tracker.epoch_start:
            raise OffsetNotAvailableError(
                f"{self.name}: the high watermark {self.high_watermark} is below "
                f"the epoch start {self.tracker.epoch_start}"
            )

    # -- the leader's data path ------------------------------------------------------------

    def append(
        self, data: bytes | bytearray | memoryview, acks: int = 1
    ) -> asyncio.Future[AppendInfo]:
        """Queue a producer's batches now (in call order); the future completes on ack.

        acks=1 (and 0): once the leader has it (the flush policy met). acks=-1:
        once the high watermark covers it, refused at once if the ISR is smaller
        than ``min.insync.replicas``.
        """
        self.require_leader()
        if acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.name} has {len(self.isr)} in-sync replicas, "
                f"min.insync.replicas is {self.min_insync_replicas}"
            )
        appended = self.writer.submit_append(data, leader_epoch=self.leader_epoch)
        if acks != -1:
            return appended
        acked: asyncio.Future[AppendInfo] = asyncio.get_running_loop().create_future()
        epoch = self.leader_epoch
        if appended.done():  # applied in this call (the writer was idle): no turn of the loop
            self._appended_for_ack(appended, acked, epoch)
        else:
            appended.add_done_callback(lambda done: self._appended_for_ack(done, acked, epoch))
        return acked

    def _appended_for_ack(
        self, appended: asyncio.Future[AppendInfo], acked: asyncio.Future[AppendInfo], epoch: int
    ) -> None:
        if acked.done():
            return
        if appended.cancelled():
            acked.cancel()
            return
        failure = appended.exception()
        if failure is not None:
            acked.set_exception(failure)
            return
        info = appended.result()
        if self.role is not Role.LEADER or self.leader_epoch != epoch:
            acked.set_exception(NotLeaderOrFollowerError(f"{self.name}: leadership moved"))
        elif info.last_offset < self.high_watermark:
            self._complete_ack(acked, info)
        else:
            heapq.heappush(self._acks, (info.last_offset, next(_sequence), acked, info))

    def _complete_ack(self, acked: asyncio.Future[AppendInfo], info: AppendInfo) -> None:
        if acked.done():
            return
        if len(self.isr) < self.min_insync_replicas:
            acked.set_exception(
                NotEnoughReplicasAfterAppendError(
                    f"{self.name}: written, but the ISR shrank below min.insync.replicas"
                )
            )
        else:
            acked.set_result(info)

    def _appended(self, info: AppendInfo) -> None:
        self.local_end = max(self.local_end, info.last_offset + 1)
        if self.tracker is not None and self.tracker.leader_appended(self.local_end):
            self._high_watermark_moved()
        else:
            self._wake()

    def follower_fetched(self, node: int, fetch_offset: int) -> None:
        """A follower asked for ``fetch_offset``: its log end (moves the high watermark)."""
        if self.tracker is not None and self.tracker.follower_fetched(node, fetch_offset, now_ms()):
            self._high_watermark_moved()

    def caught_up(self) -> set[int]:
        """Followers outside the ISR that may rejoin it."""
        return self.tracker.caught_up() if self.tracker is not None else set()

    def lagging(self, lag_max_ms: float) -> set[int]:
        """ISR followers that have not caught up for ``lag_max_ms``."""
        return self.tracker.lagging(now_ms(), lag_max_ms) if self.tracker is not None else set()

    def _high_watermark_moved(self) -> None:
        assert self.tracker is not None
        self.high_watermark = self.tracker.high_watermark
        while self._acks and self._acks[0][0] < self.high_watermark:
            _, _, acked, info = heapq.heappop(self._acks)
            self._complete_ack(acked, info)
        self._wake()

    def read(self, offset: int, max_bytes: int) -> Slice | None:
        """What a consumer may see: whole batches below the high watermark, in clear
        (encrypted batches opened; a missing key fails this partition's read only)."""
        try:
            return self.log.read_plain(offset, max_bytes, self.high_watermark)
        except CorruptRecordError as exc:
            raise self._corrupt(offset, exc) from exc

    def read_for_follower(self, offset: int, max_bytes: int) -> Slice | None:
        """What a follower may copy: whole acknowledged batches (up to the local log end),
        as stored (encrypted ones stay encrypted)."""
        try:
            return self.log.read(offset, max_bytes, self.local_end)
        except CorruptRecordError as exc:
            raise self._corrupt(offset, exc) from exc

    def _corrupt(self, offset: int, exc: CorruptRecordError) -> CorruptRecordError:
        """The error for a read that met a damaged batch (reported to :attr:`on_corrupt`).

        CORRUPT_DATA (not retriable, naming the offsets) when no in-sync replica
        has a healthy copy; else CORRUPT_MESSAGE (retriable): leadership moves
        to a healthy replica.
        """
        if self.on_corrupt is not None:
            self.on_corrupt(self, offset, exc)
        damage = self.damage
        if damage is not None and self.unrepairable:
            return CorruptDataError(
                f"{self.name}: offsets {damage.offsets()} are damaged on broker {self.node_id} "
                f"and no in-sync replica has a healthy copy ({exc}); an operator can cut or "
                "skip them with `mq storage repair`"
            )
        return CorruptRecordError(
            f"{self.name} at offset {offset} on broker {self.node_id}: {exc} "
            "(reported; a healthy replica takes over)"
        )

    # -- the follower's data path ---------------------------------------------------------

    async def append_replicated(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        return await self.writer.append_replicated(data)

    async def truncate_to(self, offset: int) -> None:
        """Drop what this replica has at or after ``offset`` (it diverged from the leader)."""
        await self.writer.call(lambda log_: log_.truncate_to(offset))
        self.local_end = self.log.next_offset
        self.high_watermark = min(self.high_watermark, self.local_end)

    async def reset_to(self, offset: int) -> None:
        """Empty this replica and restart it at ``offset`` (it fell below the leader's start)."""
        await self.writer.call(lambda log_: log_.reset_to(offset))
        self.local_end = self.log.next_offset
        self.high_watermark = self.local_end

    async def advance_log_start(self, offset: int) -> None:
        """Follow the leader's log start (delete_records, retention) as far as this log goes."""
        await self.writer.call(lambda log_: log_.advance_log_start(min(offset, log_.next_offset)))

    def follow_high_watermark(self, leader_high_watermark: int) -> None:
        self.high_watermark = min(leader_high_watermark, self.local_end)

    # -- waiting -----------------------------------------------------------------------------

    def wait_for_data(self, waiter: asyncio.Future[None] | None = None) -> asyncio.Future[None]:
        """A future that completes at the next append or move of the high watermark.

        ``waiter``: the caller's own future to complete instead, so that one long
        poll waits on many partitions with one future; it stays registered until
        woken or :meth:`stop_waiting`.
        """
        if waiter is None:
            waiter = asyncio.get_running_loop().create_future()
            waiter.add_done_callback(self._waiters.discard)
        self._waiters.add(waiter)
        return waiter

    def stop_waiting(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def checkpoint_high_watermark(self) -> None:
        """Write the high watermark to its checkpoint if it moved (in the writer's order,
        off the event loop)."""
        high = self.high_watermark
        if high == self.checkpointed_high_watermark:
            return
        self.checkpointed_high_watermark = high
        self.writer_call_nowait(
            lambda log_: write_high_watermark(log_.directory, FileIO(), min(high, log_.next_offset))
        )

    async def close(self) -> None:
        self._step_down(Role.OFFLINE)
        self._wake()  # long polls look again, and find the partition gone
        self.checkpoint_high_watermark()
        await self.writer.close()


def _retrieve(future: asyncio.Future[object]) -> None:
    if not future.cancelled():
        future.exception()

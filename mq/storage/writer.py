"""The one asyncio task that appends to a partition's log (group commit).

Producers, followers and maintenance all go through :class:`LogWriter`: each
call queues a request and awaits its future. The task wakes, takes *every*
pending request, applies them in arrival order, then applies the flush policy
once for the whole drain, and only then completes the futures:

* ``always``: one sync (in a worker thread) covers the whole drain; requests
  that arrive while it runs form the next drain. Acknowledged means on disk.
* ``interval``: futures complete right after the copy into the mapped segment
  (the page cache: safe from ``kill -9``); a background sync runs at most
  ``flush.ms`` after the first unsynced append.
* ``never``: as ``interval`` but with no timed sync; rolled segments are still
  synced in the background so that the recovery checkpoint moves on.

A request that finds the task idle, nothing queued and no sync owed under
``interval`` or ``never`` is applied at once, in the caller's call, exactly as
the task would apply a drain of one: its future is already complete when
:meth:`LogWriter.submit_append` returns. That saves a produce the wake-up and
step of the task, two turns of the event loop.

An append of :data:`THREAD_WRITE_BYTES` or more is checked and indexed on the
loop as any other, but while others are being served (``contended``) its copy into
the segment runs in the writers' blocking-call thread (:mod:`mq.storage.steps`,
:mod:`mq.storage.blocking`): the loop serves them meanwhile. It is a drain of its
own: what was queued before it is applied first, what comes after it waits for it,
so the order is unchanged.

Syncs never block the event loop, and only one sync job runs at a time (the
task's, the timer's or :meth:`LogWriter.flush`'s): two jobs would race on the
checkpoint file. A drain that holds a :meth:`LogWriter.call` waits for the sync
in flight, so a truncation never runs under a job snapshotted before it. A
failed write or sync takes the log offline (sticky
:class:`~mq.errors.StorageError`); the writers of other partitions are
untouched.

Thread safety: an instance belongs to one event loop; call it from that loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from mq.errors import MQError, StorageError
from mq.storage.blocking import blocking_calls
from mq.storage.config import FlushPolicy
from mq.storage.log import AppendInfo, Log
from mq.storage.steps import Steps, run_in_thread

log = logging.getLogger(__name__)

T = TypeVar("T")

_APPEND = 0
_REPLICATED = 1
_CALL = 2
_THREAD_CALL = 3
"""A call whose file I/O must not run on the event loop (a new leader epoch's file):
it runs in the writers' blocking-call thread (:mod:`mq.storage.blocking`, batched with
other partitions' calls), in the writer's order: what was queued before it is applied
first, what was queued after it waits for it."""

THREAD_WRITE_BYTES = 128 * 1024
"""Appends from this size on are copied into their segment in the blocking-call thread
(the broker's ``thread_write_bytes``). A ``pwrite`` into the page cache costs ~0.2 ms per
MiB on a quiet machine and 1.5-3 ms per 770 KiB under load (the noisy-neighbour
benchmark), all of it a stall of the event loop; the hop to the thread and back costs
~50 us of this append's latency and a few us of the loop, worth it from ~100 KiB on.
Smaller appends (most produce requests) stay on the loop: no hop, and applied at once
when the writer is idle."""

Drained = deque[tuple[int, Any, int, asyncio.Future[Any]]]


class LogWriter:
    """Serialises every mutation of one :class:`Log` through a single task."""

    def __init__(
        self,
        log: Log,
        *,
        on_append: Callable[[AppendInfo], None] | None = None,
        thread_write_bytes: int = THREAD_WRITE_BYTES,
        contended: Callable[[], bool] = lambda: True,
    ) -> None:
        """``thread_write_bytes``: appends this big or bigger are written in a thread
        (:data:`THREAD_WRITE_BYTES`; 0: none), while ``contended()`` says that others
        are being served (the broker: more than one tenant has requests in progress).
        Alone, a client gains nothing from the hop, and pays its cost."""
        self.log = log
        self.thread_write_bytes = thread_write_bytes
        self.contended = contended
        self._on_append = on_append
        self._pending: deque[tuple[int, Any, int, asyncio.Future[Any]]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._flush_task: asyncio.Task[None] | None = None
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flush_requested = False
        self._flush_again = False
        self._unsynced_groups: list[
            tuple[list[tuple[asyncio.Future[Any], Any]], list[AppendInfo]]
        ] = []
        self._commit_task: asyncio.Task[None] | None = None
        self._sync_lock = asyncio.Lock()
        """Held while a sync job runs, and while a drain with a call is applied."""
        self._idle = False
        """The task waits for work: a lone append may be applied in the caller's call."""

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"log-writer-{self.log.directory.name}"
            )

    async def append(
        self, data: bytes | bytearray | memoryview, *, leader_epoch: int = 0
    ) -> AppendInfo:
        """Append a producer's batches; returns once the flush policy is met."""
        result: AppendInfo = await self._submit(_APPEND, data, leader_epoch)
        return result

    def submit_append(
        self, data: bytes | bytearray | memoryview, *, leader_epoch: int = 0
    ) -> asyncio.Future[AppendInfo]:
        """Queue a producer's batches now and return the future of their ack.

        Unlike :meth:`append`, the request is queued before this returns, so
        callers that submit in some order append in that order.
        """
        return self._submit(_APPEND, data, leader_epoch)

    async def append_replicated(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append a leader's batches keeping their offsets (follower side)."""
        result: AppendInfo = await self._submit(_REPLICATED, data, 0)
        return result

    async def call(self, fn: Callable[[Log], T]) -> T:
        """Run ``fn(log)`` in the writer's order, e.g. retention or truncation."""
        result: T = await self._submit(_CALL, fn, 0)
        return result

    def submit_call(self, fn: Callable[[Log], T], *, in_thread: bool = False) -> asyncio.Future[T]:
        """Queue ``fn(log)`` now (in the writer's order) and return the future of its result.

        ``in_thread``: ``fn`` does blocking file I/O; it runs in the writers' blocking-call
        thread (:mod:`mq.storage.blocking`; nothing else touches the log meanwhile but
        readers on the event loop).
        """
        return self._submit(_THREAD_CALL if in_thread else _CALL, fn, 0)

    async def flush(self) -> None:
        """Sync everything appended so far, whatever the policy."""
        await self._wait_background_flush()
        await self._sync_now()

    def _submit(self, kind: int, payload: Any, epoch: int) -> asyncio.Future[Any]:
        if self._closing:
            raise StorageError(f"partition {self.log.directory.name} is closing")
        if self._task is None:
            self.start()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        policy = self.log.config.flush
        if (
            self._idle
            and kind < _CALL
            and not self._threaded(kind, payload)
            and not self._pending
            and not self._flush_requested
            and policy is not FlushPolicy.ALWAYS
        ):
            # the drain of one the task would make next, made now
            outcomes, appended = self._apply(deque(((kind, payload, epoch, future),)))
            self._complete(outcomes, appended)
            if appended:
                self._schedule_flush(policy)
            return future
        self._pending.append((kind, payload, epoch, future))
        self._wake.set()
        return future

    async def close(self) -> None:
        """Finish queued requests, sync, and close the log cleanly."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        if self._flush_timer is not None:
            self._flush_timer.cancel()
        await self._wait_background_flush()
        await asyncio.get_running_loop().run_in_executor(None, self.log.close)

    # -- the task ---------------------------------------------------------------

    async def _run(self) -> None:
        policy = self.log.config.flush
        while True:
            if self._flush_requested:
                self._flush_requested = False
                self._start_background_flush()
            if not self._pending:
                if self._closing:
                    if self._commit_task is not None:
                        await self._commit_task
                    return
                self._wake.clear()
                self._idle = True
                try:
                    await self._wake.wait()
                finally:
                    self._idle = False
                continue
            drained, self._pending = self._pending, deque()
            if any(kind == _THREAD_CALL for kind, *_ in drained):
                drained = await self._run_thread_call(drained)
                if not drained:
                    continue
            if any(self._threaded(kind, payload) for kind, payload, *_ in drained):
                outcomes, appended = await self._split_threaded(drained)
            elif any(kind == _CALL for kind, *_ in drained):
                async with self._sync_lock:
                    outcomes, appended = self._apply(drained)
            else:
                outcomes, appended = self._apply(drained)
            if appended and policy is FlushPolicy.ALWAYS:
                # acknowledged only once synced: the commit task syncs every group
                # copied so far while this loop copies the next one (pipelining)
                self._unsynced_groups.append((outcomes, appended))
                if self._commit_task is None or self._commit_task.done():
                    self._commit_task = asyncio.get_running_loop().create_task(self._group_commit())
                continue
            self._complete(outcomes, appended)
            if appended:
                self._schedule_flush(policy)

    def _threaded(self, kind: int, payload: Any) -> bool:
        """Whether this request is an append whose write goes to the thread."""
        return kind < _CALL and 0 < self.thread_write_bytes <= len(payload) and self.contended()

    async def _split_threaded(
        self, drained: Drained
    ) -> tuple[list[tuple[asyncio.Future[Any], Any]], list[AppendInfo]]:
        """Split ``drained`` at its first append written in the thread: what comes before
        it is applied now, the rest goes back to the front of the queue; if that append
        comes first, apply it alone (its write in the thread). Outcomes and appends."""
        head: Drained = deque()
        while drained and not self._threaded(drained[0][0], drained[0][1]):
            head.append(drained.popleft())
        if head:
            drained.extend(self._pending)
            self._pending = drained
            if any(kind == _CALL for kind, *_ in head):
                async with self._sync_lock:
                    return self._apply(head)
            return self._apply(head)
        kind, payload, epoch, future = drained.popleft()
        drained.extend(self._pending)
        self._pending = drained
        if future.cancelled():
            return [], []
        steps: Steps[AppendInfo] = (
            self.log.append_steps(payload, leader_epoch=epoch)
            if kind == _APPEND
            else self.log.append_replicated_steps(payload)
        )
        try:
            info = await run_in_thread(steps, blocking_calls().submit)
        except MQError as exc:
            return [(future, exc)], []
        except Exception as exc:  # a bug must fail its caller, not the partition's task
            log.exception("%s: unexpected error in the writer", self.log.directory.name)
            return [(future, exc)], []
        return [(future, info)], [info]

    async def _run_thread_call(
        self, drained: deque[tuple[int, Any, int, asyncio.Future[Any]]]
    ) -> deque[tuple[int, Any, int, asyncio.Future[Any]]]:
        """Split ``drained`` at its first thread call: what comes before it is returned
        (applied now), the rest goes back to the front of the queue; if the thread
        call comes first, run it (in a worker thread) and return nothing."""
        head: deque[tuple[int, Any, int, asyncio.Future[Any]]] = deque()
        while drained[0][0] != _THREAD_CALL:
            head.append(drained.popleft())
        drained.extend(self._pending)
        self._pending = drained
        if head:
            return head
        _, fn, _, future = self._pending.popleft()
        if future.cancelled():
            return head
        async with self._sync_lock:  # no sync job runs under it (as for a call)
            try:
                result = await blocking_calls().submit(fn, self.log)
            except MQError as exc:
                result = exc
            except Exception as exc:  # a bug must fail its caller, not the partition's task
                log.exception("%s: unexpected error in the writer", self.log.directory.name)
                result = exc
        if not future.done():
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
        return head

    def _complete(
        self, outcomes: list[tuple[asyncio.Future[Any], Any]], appended: list[AppendInfo]
    ) -> None:
        for future, result in outcomes:
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
        if self._on_append is not None:
            for info in appended:
                try:
                    self._on_append(info)
                except Exception:  # the partition's task must outlive a bug in a callback
                    log.exception("%s: on_append failed", self.log.directory.name)

    async def _group_commit(self) -> None:
        """Sync and acknowledge copied groups, oldest first, until none is left."""
        while self._unsynced_groups:
            groups: list[tuple[list[tuple[asyncio.Future[Any], Any]], list[AppendInfo]]] = []
            try:
                async with self._sync_lock:
                    groups, self._unsynced_groups = self._unsynced_groups, []
                    job = self.log.begin_flush()  # covers every group taken above
                    if job is not None:
                        await asyncio.get_running_loop().run_in_executor(None, job.run)
                        self.log.end_flush(job)
            except StorageError as exc:
                for outcomes, _ in groups:
                    failed = [(f, r if isinstance(r, BaseException) else exc) for f, r in outcomes]
                    self._complete(failed, [])
                continue
            for outcomes, appended in groups:
                self._complete(outcomes, appended)

    def _apply(
        self, drained: deque[tuple[int, Any, int, asyncio.Future[Any]]]
    ) -> tuple[list[tuple[asyncio.Future[Any], Any]], list[AppendInfo]]:
        outcomes: list[tuple[asyncio.Future[Any], Any]] = []
        appended: list[AppendInfo] = []
        log_ = self.log
        for kind, payload, epoch, future in drained:
            if future.cancelled():
                continue
            try:
                if kind == _APPEND:
                    info = log_.append(payload, leader_epoch=epoch)
                    appended.append(info)
                    outcomes.append((future, info))
                elif kind == _REPLICATED:
                    info = log_.append_replicated(payload)
                    appended.append(info)
                    outcomes.append((future, info))
                else:
                    outcomes.append((future, payload(log_)))
            except MQError as exc:
                outcomes.append((future, exc))
            except Exception as exc:  # a bug must fail its caller, not the partition's task
                log.exception("%s: unexpected error in the writer", log_.directory.name)
                outcomes.append((future, exc))
        return outcomes, appended

    # -- flushing ---------------------------------------------------------------

    async def _sync_now(self) -> None:
        async with self._sync_lock:
            job = self.log.begin_flush()
            if job is not None:
                await asyncio.get_running_loop().run_in_executor(None, job.run)
                self.log.end_flush(job)

    def _schedule_flush(self, policy: FlushPolicy) -> None:
        if policy is FlushPolicy.INTERVAL:
            if self._flush_timer is None:
                delay = self.log.config.flush_ms / 1000
                self._flush_timer = asyncio.get_running_loop().call_later(delay, self._flush_due)
        elif policy is FlushPolicy.NEVER and self.log.has_unsynced_segments:
            self._flush_due()

    def _flush_due(self) -> None:
        self._flush_timer = None
        self._flush_requested = True
        self._wake.set()

    def _start_background_flush(self) -> None:
        if self._flush_task is not None and not self._flush_task.done():
            self._flush_again = True  # one sync at a time; go again when it ends
            return
        self._flush_task = asyncio.get_running_loop().create_task(self._background_flush())

    async def _background_flush(self) -> None:
        try:
            await self._sync_now()
        except StorageError:
            return  # the log is offline now and says so to every later request
        if self._flush_again:
            self._flush_again = False
            self._flush_due()

    async def _wait_background_flush(self) -> None:
        if self._flush_task is not None:
            await self._flush_task

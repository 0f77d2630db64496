"""Blocking file calls of the partitions' writers: one thread, in batches (issue 18).

A partition that starts to lead replaces its ``leader-epoch.checkpoint`` before
any append of the new epoch (:meth:`~mq.storage.log.Log.begin_epoch`, queued by
:meth:`~mq.storage.writer.LogWriter.submit_call` with ``in_thread``). A
``create_topics`` of 1,000 partitions makes 1,000 such calls within a second.
In the event loop's default executor they ran in up to six threads at once
(``min(32, cpus + 4)`` on two cores), which with the two threads opening the
partitions' files took the GIL from the event loop in turn: a fresh
connection's ``api_versions`` waited up to 194 ms behind the flood (the
isolation benchmark), and each call cost the loop a thread hand-off of its
own (a ``concurrent.futures.Future``, its lock and condition, a wake-up).

Here every such call of a loop's writers goes to :class:`BlockingCalls`: calls
queued within one turn of the loop, and while a batch runs, are run together
in the single thread :data:`BLOCKING_THREADS`, at most :data:`BATCH_CALLS` at a
time, and their results come back to the loop in one callback. Each caller's
future completes after its own call returned, so a writer that awaits its
call still applies nothing queued after it before the file is written: the
ordering :mod:`mq.storage.writer` promises is unchanged.

Thread safety: :meth:`BlockingCalls.submit` runs on the event loop that owns
the instance; only :func:`_run_batch` runs in the thread, on calls whose
logs' writers wait for them meanwhile (nothing else mutates those logs).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

T = TypeVar("T")

BLOCKING_THREADS: Final = 1
"""Threads that run the writers' blocking calls. One: the calls are short (a small file
written and renamed, no sync: the log's next flush syncs it) and each is a contender for
the GIL with the event loop; more threads would write no faster on one disk but take the
GIL from the loop more often."""
BATCH_CALLS: Final = 64
"""Calls run per trip to the thread and back: ~50-100 us of file system calls each, so a
batch holds its callers a few milliseconds, and the loop pays one wake-up for up to this
many partitions instead of one each."""

_EXECUTOR = ThreadPoolExecutor(BLOCKING_THREADS, thread_name_prefix="mq-blocking")
"""Process-wide (as the codec thread): its threads serve every loop's :class:`BlockingCalls`."""

Call = tuple[Callable[[Any], Any], Any]


class BlockingCalls:
    """Runs blocking calls in :data:`_EXECUTOR`, batched, for one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop_ref = weakref.ref(loop)
        """Weak: the per-loop registry must not keep a finished loop alive."""
        self._queue: deque[tuple[Callable[[Any], Any], Any, asyncio.Future[Any]]] = deque()
        self._running = False
        """A batch is on its way (or scheduled to go this turn)."""
        self.batches = 0
        """Batches run so far (tests check that calls are coalesced)."""

    def submit(self, fn: Callable[[T], object], arg: T) -> asyncio.Future[Any]:
        """Queue ``fn(arg)`` for the thread; the future of its result (or exception)."""
        loop = asyncio.get_running_loop()
        assert loop is self._loop_ref(), "BlockingCalls belongs to another event loop"
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((fn, arg, future))
        if not self._running:
            self._running = True
            loop.call_soon(self._start)  # the calls queued this turn go together
        return future

    def _start(self) -> None:
        batch: list[asyncio.Future[Any]] = []
        calls: list[Call] = []
        while self._queue and len(calls) < BATCH_CALLS:
            fn, arg, future = self._queue.popleft()
            if not future.cancelled():  # its caller gave up on it before it ran
                batch.append(future)
                calls.append((fn, arg))
        if not calls:
            self._running = False
            return
        self.batches += 1
        try:
            job = _EXECUTOR.submit(_run_batch, calls)
        except RuntimeError as exc:  # the interpreter is shutting down
            self._finish(batch, [exc] * len(calls))
            return
        job.add_done_callback(lambda job: self._returned(batch, job))

    def _returned(self, batch: list[asyncio.Future[Any]], job: ThreadFuture[list[Any]]) -> None:
        """In the thread: hand the batch's results to the loop."""
        loop = self._loop_ref()
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._finish, batch, job.result())
            except RuntimeError:  # closed meanwhile: nobody waits for these any more
                pass

    def _finish(self, batch: list[asyncio.Future[Any]], results: list[Any]) -> None:
        for future, result in zip(batch, results, strict=True):
            if future.done():
                continue  # its caller gave up on it while it ran
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
        if self._queue:
            self._start()
        else:
            self._running = False


def _run_batch(calls: list[Call]) -> list[Any]:
    """Run each call in turn (in the thread); its result or exception, one per call."""
    results: list[Any] = []
    for fn, arg in calls:
        try:
            results.append(fn(arg))
        except Exception as exc:  # its caller's (which says whose call it was): not the batch's
            results.append(exc)
    return results


_PER_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BlockingCalls] = (
    weakref.WeakKeyDictionary()
)


def blocking_calls() -> BlockingCalls:
    """The running loop's :class:`BlockingCalls` (made on first use)."""
    loop = asyncio.get_running_loop()
    calls = _PER_LOOP.get(loop)
    if calls is None:
        calls = _PER_LOOP[loop] = BlockingCalls(loop)
    return calls

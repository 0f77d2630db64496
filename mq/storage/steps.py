"""An append as steps: the bookkeeping on the caller's thread, the copy wherever it runs.

Copying a big append into the page cache is a ``pwrite`` of up to a megabyte or
more: ~0.2 ms per MiB on a quiet machine, 1.5-3 ms under load (measured with the
noisy-neighbour benchmark: 770 KiB appends, p99 1.4 ms, max 3.3 ms). On the event
loop that is a stall for every other client. So :meth:`~mq.storage.log.Log.append_steps`
is a generator: it checks the batches, picks (or rolls) the segment and reserves the
bytes, then *yields* the one blocking step, a :class:`FileWrite`, and once resumed
indexes the batches and makes them readable. Whoever drives it decides where the
write runs: :func:`run_inline` right there (every small append, and every caller
that is not the partition's writer task), :func:`run_in_thread` in a worker thread
while the loop serves others (:mod:`mq.storage.writer`, for appends of
:data:`~mq.storage.writer.THREAD_WRITE_BYTES` or more).

Between the yield and the resumption nothing else may change the log: the
partition's writer task is its only writer and awaits the step, and readers see
only what the segment's size covers, which moves after the write.

A write that fails is thrown back into the generator at its yield, so the log's
error handling (taking the log offline on an ``OSError``) is the same either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import TypeVar, cast

from mq.storage.fileio import FileIO

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FileWrite:
    """An append's bytes, to be written at ``offset`` of the (pinned) descriptor ``fd``."""

    io: FileIO
    fd: int
    data: bytes | bytearray | memoryview
    offset: int

    def run(self) -> None:
        self.io.pwrite(self.fd, self.data, self.offset)


Steps = Generator[FileWrite, None, T]


def _resume(steps: Steps[T], error: Exception | None) -> tuple[FileWrite | None, T | None]:
    """Resume ``steps`` (``error`` thrown in at the yield, if any): (the next write, None),
    or (None, what they returned) once they are done."""
    try:
        return (steps.send(None) if error is None else steps.throw(error)), None
    except StopIteration as stop:
        return None, stop.value


def run_inline(steps: Steps[T]) -> T:
    """Drive ``steps`` to the end, each write right here; return what they return."""
    write, result = _resume(steps, None)
    while write is not None:
        error: Exception | None = None
        try:
            write.run()
        except Exception as exc:  # thrown back at the yield: the log handles it
            error = exc
        write, result = _resume(steps, error)
    return cast(T, result)  # None only if T admits it: what the steps returned


async def run_in_thread(
    steps: Steps[T], submit: Callable[[Callable[[FileWrite], None], FileWrite], Awaitable[None]]
) -> T:
    """Drive ``steps`` to the end, each write through ``submit`` (a worker thread).

    If the caller is cancelled while a write runs, the write is still waited for
    before the steps are closed: the descriptor it uses stays pinned until then.
    """
    write, result = _resume(steps, None)
    while write is not None:
        error: Exception | None = None
        done = asyncio.ensure_future(submit(FileWrite.run, write))
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            if not done.done():
                await asyncio.wait([done])
            steps.close()
            raise
        except Exception as exc:  # thrown back at the yield: the log handles it
            error = exc
        write, result = _resume(steps, error)
    return cast(T, result)  # None only if T admits it: what the steps returned

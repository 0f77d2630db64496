"""Big appends are copied into their segment in a thread, not on the event loop.

A real :class:`Log` and :class:`LogWriter`, with a file seam whose ``pwrite`` can be
held (a gate) or made to fail: while a big append's copy is held, the event loop keeps
running, nothing of it is readable, appends queued after it wait (order kept), and
small appends are still written on the loop (no thread hop). A failed copy takes the
log offline as on the loop, and leaves no descriptor pinned.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path

import pytest
from storage_helpers import make_batch

from mq.errors import StorageError
from mq.records.batch import iter_batches
from mq.storage.config import LogConfig
from mq.storage.fileio import FileIO
from mq.storage.log import Log
from mq.storage.steps import FileWrite, run_in_thread
from mq.storage.writer import THREAD_WRITE_BYTES, LogWriter

KiB = 1024
CONFIG = LogConfig(segment_bytes=8 * 1024 * KiB, max_message_bytes=2 * 1024 * KiB)
GATE_S = 5.0
"""Longest a held copy waits for its gate (the test fails rather than hang)."""


class GatedIO(FileIO):
    """Records which thread wrote how much; holds (or fails) writes of ``hold_from`` bytes on."""

    def __init__(self, hold_from: int) -> None:
        self.hold_from = hold_from
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail: OSError | None = None
        self.writes: list[tuple[int, str]] = []

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        self.writes.append((len(data), threading.current_thread().name))
        if len(data) >= self.hold_from:
            self.entered.set()
            self.gate.wait(GATE_S)
            if self.fail is not None:
                raise self.fail
        super().pwrite(fd, data, offset)


def big_batch() -> bytes:
    return make_batch(0, 64, value_size=THREAD_WRITE_BYTES // 64 + 100)


async def test_the_loop_runs_while_a_big_append_is_copied(tmp_path: Path) -> None:
    io = GatedIO(THREAD_WRITE_BYTES)
    writer = LogWriter(Log.open(tmp_path / "t-0", CONFIG, io=io))
    writer.start()
    try:
        big = writer.submit_append(big_batch())
        await asyncio.to_thread(io.entered.wait, GATE_S)
        assert io.entered.is_set(), "the big append was never written"
        ticks = 0
        for _ in range(20):  # the loop turns while the copy is held in its thread
            await asyncio.sleep(0.001)
            ticks += 1
        assert ticks == 20
        assert not big.done()
        assert writer.log.next_offset == 0  # nothing of it is readable yet
        assert writer.log.read(0, 1 << 20) is None
        small = writer.submit_append(make_batch(0, 3))  # queued behind it
        await asyncio.sleep(0.01)
        assert not small.done()
        io.gate.set()
        first, second = await big, await small
        writes = list(io.writes)  # the appends' (closing the log writes its indexes too)
        assert (first.first_offset, first.last_offset) == (0, 63)
        assert (second.first_offset, second.last_offset) == (64, 66)
        read = writer.log.read(0, 4 << 20)
        assert read is not None
        offsets = [h.base_offset for _, h in iter_batches_at(bytes(read.data))]
        assert offsets == [0, 64]
    finally:
        io.gate.set()
        await writer.close()
    main = threading.current_thread().name
    big_writes = [name for size, name in writes if size >= THREAD_WRITE_BYTES]
    small_writes = [name for size, name in writes if size < THREAD_WRITE_BYTES]
    assert big_writes
    assert main not in big_writes
    assert set(small_writes) == {main}  # a small append pays no thread hop


def iter_batches_at(data: bytes) -> list[tuple[int, object]]:
    out: list[tuple[int, object]] = []
    pos = 0
    for header in iter_batches(data):
        out.append((pos, header))
        pos += header.size
    return out


@pytest.mark.parametrize(
    ("threshold", "contended"), [(0, True), (THREAD_WRITE_BYTES, False)], ids=["off", "alone"]
)
async def test_big_appends_stay_on_the_loop_when_off_or_alone(
    tmp_path: Path, threshold: int, contended: bool
) -> None:
    """``thread_write_bytes = 0``, or nobody else being served: no thread hop."""
    io = GatedIO(1 << 40)
    log = Log.open(tmp_path / "t-0", CONFIG, io=io)
    writer = LogWriter(log, thread_write_bytes=threshold, contended=lambda: contended)
    writer.start()
    try:
        info = await writer.append(big_batch())
        assert (info.first_offset, info.last_offset) == (0, 63)
        writes = list(io.writes)
    finally:
        await writer.close()
    assert {name for _, name in writes} == {threading.current_thread().name}


async def test_a_failed_copy_in_the_thread_takes_the_log_offline(tmp_path: Path) -> None:
    io = GatedIO(THREAD_WRITE_BYTES)
    io.fail = OSError(errno.ENOSPC, "injected ENOSPC")
    io.gate.set()
    log = Log.open(tmp_path / "t-0", CONFIG, io=io)
    writer = LogWriter(log)
    writer.start()
    try:
        before = await writer.append(make_batch(0, 2))
        with pytest.raises(StorageError, match="injected ENOSPC"):
            await writer.append(big_batch())
        assert log.offline is not None
        assert log.next_offset == before.last_offset + 1  # nothing of it counted
        handle = log.segments[-1]._file  # the active segment's descriptor
        assert handle is not None
        assert handle.pins == 0
        with pytest.raises(StorageError):
            await writer.append(make_batch(0, 1))
    finally:
        await writer.close()


async def test_a_cancelled_driver_waits_for_the_copy_before_closing_the_steps() -> None:
    """The descriptor a held copy uses stays pinned until the copy returned."""
    gate = threading.Event()
    events: list[str] = []

    class SlowIO(FileIO):
        def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
            gate.wait(GATE_S)
            events.append("copied")

    def steps():  # type: ignore[no-untyped-def]
        try:
            yield FileWrite(SlowIO(), -1, b"x", 0)
            events.append("resumed")
        finally:
            events.append("closed")

    def submit(fn, write):  # type: ignore[no-untyped-def]
        return asyncio.ensure_future(asyncio.to_thread(fn, write))

    driver = asyncio.ensure_future(run_in_thread(steps(), submit))
    await asyncio.sleep(0.05)
    driver.cancel()
    await asyncio.sleep(0.05)
    assert events == []
    assert not driver.done()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await driver
    assert events == ["copied", "closed"]

"""Faults injected through the FileIO seam, and the LogWriter's promises.

A failed write or sync takes exactly one partition offline with a
:class:`StorageError` that every later call gets again; nothing acknowledged
before it is lost when the log is reopened with the ordinary seam. The writer
task groups a drain into one sync, keeps submission order, honours
``flush=interval``, and fails only the request that was bad.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from storage_helpers import TrackingIO, as_stored, make_batch, split_batches

from mq.errors import CorruptRecordError, MQError, StorageError
from mq.storage.checkpoint import read_checkpoint
from mq.storage.config import FlushPolicy, KiB, LogConfig
from mq.storage.fileio import DEFAULT_IO
from mq.storage.log import AppendInfo, Log
from mq.storage.writer import LogWriter

CONFIG = LogConfig(segment_bytes=64 * KiB, index_interval_bytes=1024, max_message_bytes=32 * KiB)
ALWAYS = LogConfig(
    segment_bytes=64 * KiB,
    index_interval_bytes=1024,
    max_message_bytes=32 * KiB,
    flush=FlushPolicy.ALWAYS,
)

Rule = Callable[[str, Path], OSError | None]


@dataclass
class FaultyIO(TrackingIO):
    """Counts calls per operation and raises what a rule returns for (operation, path)."""

    rules: list[Rule] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    sync_delay: float = 0.0
    gate: threading.Event | None = None
    """When set, fdatasync waits for it to open (a sync held in its thread)."""

    def _hook(self, op: str, path: Path) -> None:
        self.counts[op] += 1
        for rule in self.rules:
            exc = rule(op, path)
            if exc is not None:
                raise exc

    def open(self, path: Path, *, create: bool = False, write: bool = True) -> int:
        self._hook("create" if create and not Path(path).exists() else "open", Path(path))
        return super().open(path, create=create, write=write)

    def truncate(self, fd: int, length: int) -> None:
        self._hook("truncate", self.paths[fd])
        super().truncate(fd, length)

    def allocate(self, fd: int, offset: int, length: int) -> None:
        self._hook("allocate", self.paths[fd])
        super().allocate(fd, offset, length)

    def fdatasync(self, fd: int) -> None:
        self._hook("fdatasync", self.paths[fd])
        time.sleep(self.sync_delay)
        if self.gate is not None:
            assert self.gate.wait(5)
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._hook("fsync", self.paths[fd])
        super().fsync(fd)

    def unlink(self, path: Path) -> None:
        self._hook("unlink", Path(path))
        super().unlink(path)

    def write_file_atomic(self, path: Path, data: bytes, *, durable: bool = True) -> None:
        self._hook("checkpoint", Path(path))
        time.sleep(self.sync_delay)
        super().write_file_atomic(path, data, durable=durable)


def fail_nth(op: str, n: int, code: int, *, under: Path | None = None) -> Rule:
    """Fail the ``n``-th (1-based) call of ``op`` (under ``under``) and every later one."""
    seen = 0

    def rule(operation: str, path: Path) -> OSError | None:
        nonlocal seen
        if operation != op or (under is not None and under not in path.parents):
            return None
        seen += 1
        return OSError(code, f"injected {errno.errorcode[code]}") if seen >= n else None

    return rule


def read_back(directory: Path, config: LogConfig = CONFIG) -> tuple[Log, list[bytes]]:
    """Reopen with the ordinary seam and read every batch."""
    log = Log.open(directory, config)
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.next_offset:
        got = log.read(offset, 1 << 20)
        assert got is not None
        out.extend(split_batches(got.data))
        offset = got.next_offset
    return log, out


def assert_acked_survive(directory: Path, acked: list[tuple[AppendInfo, bytes]]) -> Log:
    log, batches = read_back(directory)
    by_offset = {int.from_bytes(b[:8], "big"): b for b in batches}
    for info, raw in acked:
        assert by_offset.get(info.first_offset) == as_stored(raw, info.first_offset), info
    return log


def assert_offline_for_good(log: Log, error: StorageError) -> None:
    assert log.offline is error
    with pytest.raises(StorageError) as caught:
        log.append(make_batch(0, 1))
    assert caught.value is error
    with pytest.raises(StorageError) as caught:
        log.read(log.log_start_offset, 100)
    assert caught.value is error
    with pytest.raises(StorageError) as caught:
        log.flush()
    assert caught.value is error


# -- the Log on its own -----------------------------------------------------------------


def append_until_it_fails(log: Log, acked: list[tuple[AppendInfo, bytes]]) -> StorageError:
    """Append ~6 KiB batches until the injected fault hits; every success is recorded."""
    for _ in range(100):
        raw = make_batch(log.next_offset, 4, value_size=1500)
        try:
            acked.append((log.append(raw), raw))
        except StorageError as exc:
            return exc
    raise AssertionError("the fault never hit")


def test_enospc_reserving_blocks_takes_the_log_offline(tmp_path: Path) -> None:
    io = FaultyIO()
    io.rules.append(fail_nth("allocate", 3, errno.ENOSPC))  # the third segment's reservation
    log = Log.open(tmp_path, CONFIG, io=io)
    acked: list[tuple[AppendInfo, bytes]] = []
    error = append_until_it_fails(log, acked)
    assert "offline" in str(error)
    assert "No space left" in str(error) or "ENOSPC" in str(error)
    assert isinstance(error.__cause__, OSError)
    assert error.__cause__.errno == errno.ENOSPC
    assert len(log.segments) == 3
    assert_offline_for_good(log, error)
    end = log.next_offset
    log.close()  # offline: lets go of the files, writes nothing
    assert io.paths == {}, "file descriptors left open"
    reopened = assert_acked_survive(tmp_path, acked)
    assert reopened.next_offset == end  # the refused batch is not there
    reopened.close()


def test_eio_from_fdatasync_takes_the_log_offline(tmp_path: Path) -> None:
    io = FaultyIO()
    log = Log.open(tmp_path, CONFIG, io=io)
    acked: list[tuple[AppendInfo, bytes]] = []
    for _ in range(5):
        raw = make_batch(log.next_offset, 2)
        acked.append((log.append(raw), raw))
    log.flush()
    io.rules.append(fail_nth("fdatasync", 1, errno.EIO))
    log.append(make_batch(log.next_offset, 2))
    with pytest.raises(StorageError) as caught:
        log.flush()
    assert caught.value.__cause__ is not None
    assert_offline_for_good(log, caught.value)
    log.close()
    assert io.paths == {}
    assert_acked_survive(tmp_path, acked).close()


@pytest.mark.parametrize("op", ["create", "truncate"])
def test_enospc_on_roll_takes_the_log_offline(tmp_path: Path, op: str) -> None:
    io = FaultyIO()
    first = tmp_path / f"{0:020d}.log"

    def on_new_segment(operation: str, path: Path) -> OSError | None:
        if operation == op and path.suffix == ".log" and path != first:
            return OSError(errno.ENOSPC, "injected ENOSPC")
        return None

    log = Log.open(tmp_path, CONFIG, io=io)
    io.rules.append(on_new_segment)
    acked: list[tuple[AppendInfo, bytes]] = []
    error = append_until_it_fails(log, acked)
    assert "append failed" in str(error)
    assert_offline_for_good(log, error)
    end = log.next_offset
    log.close()
    assert io.paths == {}, "file descriptors left open"
    reopened = assert_acked_survive(tmp_path, acked)
    assert reopened.next_offset == end
    info = reopened.append(make_batch(end, 1))  # the disk has room again
    assert info.first_offset == end
    reopened.close()


def test_truncation_cut_short_leaves_no_hole(tmp_path: Path) -> None:
    """A truncation that stops halfway (a crash, a failed unlink) leaves a prefix of the log.

    Were the later segments deleted oldest first, a stop in between would keep
    a newer segment after a deleted one: offsets with no batch, then more data.
    """
    io = FaultyIO()
    log = Log.open(tmp_path, CONFIG, io=io)
    acked: list[tuple[AppendInfo, bytes]] = []
    for _ in range(60):
        raw = make_batch(log.next_offset, 4, value_size=1500)
        acked.append((log.append(raw), raw))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    io.rules.append(fail_nth("unlink", 2, errno.EIO))
    with pytest.raises(StorageError):
        log.truncate_to(bases[1] + 1)
    log.close()
    reopened, batches = read_back(tmp_path)
    expected = [as_stored(raw, info.first_offset) for info, raw in acked]
    assert batches == expected[: len(batches)], "the log is not a prefix of what was written"
    offsets = [int.from_bytes(b[:8], "big") for b in batches]
    assert offsets[-1] + 4 == reopened.next_offset
    reopened.close()


# -- the writer task -------------------------------------------------------------------


async def test_fsync_failure_fails_its_futures_and_spares_other_partitions(
    tmp_path: Path,
) -> None:
    io = FaultyIO()
    bad_dir, good_dir = tmp_path / "t-0", tmp_path / "t-1"
    bad = LogWriter(Log.open(bad_dir, ALWAYS, io=io))
    good = LogWriter(Log.open(good_dir, ALWAYS, io=io))
    acked = [(await bad.append(raw), raw) for raw in [make_batch(0, 3) for _ in range(5)]]
    io.rules.append(fail_nth("fdatasync", 1, errno.EIO, under=bad_dir))

    raws = [make_batch(0, 2) for _ in range(20)]
    results = await asyncio.gather(
        *(bad.append(r) for r in raws), *(good.append(r) for r in raws), return_exceptions=True
    )
    failed, succeeded = results[:20], results[20:]
    assert all(isinstance(r, StorageError) for r in failed), failed
    assert len({id(r) for r in failed}) == 1  # the one sticky error
    assert all(isinstance(r, AppendInfo) for r in succeeded), succeeded
    with pytest.raises(StorageError):
        await bad.append(make_batch(0, 1))
    more = await good.append(make_batch(0, 1))
    assert more.first_offset == 40

    await bad.close()
    await good.close()
    assert_acked_survive(bad_dir, acked).close()
    log, batches = read_back(good_dir)
    assert len(batches) == 21
    log.close()


async def test_group_commit_syncs_far_less_than_it_appends(tmp_path: Path) -> None:
    io = FaultyIO(sync_delay=0.002)
    synced_at_ack: list[bool] = []
    log = Log.open(tmp_path, ALWAYS, io=io)
    writer = LogWriter(log, on_append=lambda info: synced_at_ack.append(log.unflushed_bytes == 0))
    raws = [make_batch(0, 1 + n % 3, value_size=200) for n in range(300)]
    infos = await asyncio.gather(*(writer.append(r) for r in raws))
    # offsets follow submission order, densely
    expected = 0
    for info, raw in zip(infos, raws, strict=True):
        assert info.first_offset == expected
        expected = info.last_offset + 1
        assert info.size == len(raw)
    assert all(synced_at_ack)
    assert len(synced_at_ack) == 300
    assert 1 <= io.counts["fdatasync"] <= 30, io.counts
    await writer.close()
    log, batches = read_back(tmp_path)
    assert batches == [as_stored(r, i.first_offset) for r, i in zip(raws, infos, strict=True)]
    log.close()


async def test_interval_policy_acks_first_and_syncs_within_flush_ms(tmp_path: Path) -> None:
    flush_ms = 40
    io = FaultyIO()
    config = LogConfig(segment_bytes=64 * KiB, max_message_bytes=32 * KiB, flush_ms=flush_ms)
    log = Log.open(tmp_path, config, io=io)
    writer = LogWriter(log)
    loop = asyncio.get_running_loop()

    await writer.append(make_batch(0, 1))
    acked_at = loop.time()
    assert io.counts["fdatasync"] == 0  # acknowledged from the page cache
    assert log.unflushed_bytes > 0
    while io.counts["fdatasync"] == 0:
        assert loop.time() - acked_at < flush_ms / 1000 + 0.5, "no sync within flush.ms"
        await asyncio.sleep(0.005)
    assert loop.time() - acked_at >= flush_ms / 1000 * 0.8
    await asyncio.sleep(0.01)
    assert log.unflushed_bytes == 0

    # a steady stream of appends is synced about once per flush.ms, not per append
    before = io.counts["fdatasync"]
    start = loop.time()
    appended = 0
    while loop.time() - start < 0.4:
        await writer.append(make_batch(0, 1))
        appended += 1
        await asyncio.sleep(0.002)
    elapsed = loop.time() - start
    syncs = io.counts["fdatasync"] - before
    assert syncs <= elapsed * 1000 / flush_ms + 2, (syncs, elapsed)
    assert syncs >= 2
    assert appended > 3 * syncs
    await writer.close()


async def test_calls_run_in_submission_order(tmp_path: Path) -> None:
    writer = LogWriter(Log.open(tmp_path, CONFIG))
    ops: list[asyncio.Future[object]] = []
    for _ in range(10):
        ops.append(asyncio.ensure_future(writer.append(make_batch(0, 2))))
        ops.append(asyncio.ensure_future(writer.call(lambda log: log.next_offset)))
    results = await asyncio.gather(*ops)
    seen = [r for r in results if isinstance(r, int)]
    assert seen == [2 * (n + 1) for n in range(10)]
    await writer.close()


async def test_close_drains_everything_then_closes_cleanly(tmp_path: Path) -> None:
    writer = LogWriter(Log.open(tmp_path, CONFIG))
    raws = [make_batch(0, 2, value_size=500) for _ in range(200)]
    pending = [asyncio.ensure_future(writer.append(r)) for r in raws]
    await asyncio.sleep(0)  # every append is queued
    await writer.close()
    infos = [p.result() for p in pending]
    assert [i.first_offset for i in infos] == list(range(0, 400, 2))
    with pytest.raises(StorageError):
        await writer.append(make_batch(0, 1))
    checkpoint = read_checkpoint(tmp_path, DEFAULT_IO)
    assert checkpoint is not None
    assert checkpoint.clean
    log, batches = read_back(tmp_path)
    assert batches == [as_stored(r, i.first_offset) for r, i in zip(raws, infos, strict=True)]
    log.close()


async def test_cancelled_appends_are_skipped(tmp_path: Path) -> None:
    io = FaultyIO(sync_delay=0.05)
    writer = LogWriter(Log.open(tmp_path, ALWAYS, io=io))
    first = asyncio.ensure_future(writer.append(make_batch(0, 3)))
    while io.counts["fdatasync"] == 0:  # noqa: ASYNC110 - the first drain is syncing now
        await asyncio.sleep(0.001)
    doomed = asyncio.ensure_future(writer.append(make_batch(0, 5)))
    kept = asyncio.ensure_future(writer.append(make_batch(0, 1)))
    await asyncio.sleep(0)
    doomed.cancel()
    a, c = await first, await kept
    assert doomed.cancelled()
    assert c.first_offset == a.last_offset + 1 == 3
    await writer.close()
    log, batches = read_back(tmp_path)
    assert len(batches) == 2
    log.close()


async def test_a_bad_batch_fails_only_its_own_future(tmp_path: Path) -> None:
    writer = LogWriter(Log.open(tmp_path, ALWAYS))
    bad = bytearray(make_batch(0, 2))
    bad[-1] ^= 0xFF
    results = await asyncio.gather(
        writer.append(make_batch(0, 2)),
        writer.append(bytes(bad)),
        writer.append(make_batch(0, 3)),
        return_exceptions=True,
    )
    assert isinstance(results[1], CorruptRecordError)
    assert isinstance(results[0], AppendInfo)
    assert isinstance(results[2], AppendInfo)
    assert results[2].first_offset == results[0].last_offset + 1
    assert writer.log.offline is None
    await writer.close()


async def test_a_failing_call_fails_only_its_own_future(tmp_path: Path) -> None:
    writer = LogWriter(Log.open(tmp_path, CONFIG))

    def boom(log: Log) -> None:
        raise MQError("no")

    results = await asyncio.gather(
        writer.append(make_batch(0, 1)),
        writer.call(boom),
        writer.append(make_batch(0, 1)),
        return_exceptions=True,
    )
    assert isinstance(results[1], MQError)
    assert isinstance(results[2], AppendInfo)
    await writer.close()


@pytest.mark.parametrize("policy", [FlushPolicy.ALWAYS, FlushPolicy.INTERVAL])
async def test_flushes_from_outside_do_not_race_the_writer(
    tmp_path: Path, policy: FlushPolicy
) -> None:
    """``writer.flush()`` while the task syncs: one sync job at a time, never two."""
    io = FaultyIO(sync_delay=0.003)
    config = LogConfig(segment_bytes=64 * KiB, max_message_bytes=32 * KiB, flush=policy, flush_ms=1)
    writer = LogWriter(Log.open(tmp_path, config, io=io))

    async def appender() -> list[AppendInfo]:
        return [await writer.append(make_batch(0, 4, value_size=2000)) for _ in range(60)]

    async def flusher() -> None:
        for _ in range(40):
            await writer.flush()
            await asyncio.sleep(0.001)

    await asyncio.gather(appender(), flusher(), flusher(), appender())
    assert writer.log.offline is None
    await writer.close()
    log, batches = read_back(tmp_path)
    assert len(batches) == 120
    log.close()


async def test_truncation_waits_for_a_sync_in_flight(tmp_path: Path) -> None:
    """A call never runs while a sync job is in a thread (the job's checkpoint would be stale)."""
    io = FaultyIO()
    config = LogConfig(segment_bytes=64 * KiB, max_message_bytes=32 * KiB, flush_ms=1)
    writer = LogWriter(Log.open(tmp_path, config, io=io))
    batch = make_batch(0, 4, value_size=2000)
    for _ in range(30):  # several segments
        await writer.append(batch)
    while writer.log.segments[-1].room() >= len(batch):
        await writer.append(batch)
    await writer.flush()
    # the next append rolls; the timer's sync job then carries a checkpoint for the
    # new segment, and it is held inside fdatasync until the gate opens
    io.gate = threading.Event()
    syncs = io.counts["fdatasync"]
    await writer.append(batch)
    while io.counts["fdatasync"] == syncs:  # noqa: ASYNC110 - wait for the job to start
        await asyncio.sleep(0.001)
    written = len(io.checkpoints)
    truncation = asyncio.ensure_future(writer.call(lambda log: log.truncate_to(2)))
    await asyncio.sleep(0.05)
    io.gate.set()
    await truncation
    await writer.close()
    # from the truncation's checkpoint on, every one must send recovery to segment 0;
    # a job snapshotted before the truncation may not write its older view after it
    froms = [int(c.decode().split("\n")[1].split()[0]) for c in io.checkpoints[written:]]
    assert froms[0] > 0  # the job's own checkpoint went first
    assert set(froms[froms.index(0) :]) == {0}, froms


async def test_a_failing_on_append_callback_does_not_stop_the_writer(tmp_path: Path) -> None:
    calls: list[AppendInfo] = []

    def broken(info: AppendInfo) -> None:
        calls.append(info)
        raise RuntimeError("a bug in the callback")

    writer = LogWriter(Log.open(tmp_path, CONFIG), on_append=broken)
    async with asyncio.timeout(5):
        first = await writer.append(make_batch(0, 1))
        second = await writer.append(make_batch(1, 2))
    assert (first.first_offset, second.last_offset) == (0, 2)
    assert [c.first_offset for c in calls] == [0, 1]
    await writer.close()


async def test_a_lone_append_to_an_idle_writer_is_applied_in_the_call(tmp_path: Path) -> None:
    writer = LogWriter(Log.open(tmp_path, CONFIG))
    first = writer.submit_append(make_batch(0, 2))  # the task is not running yet: queued
    assert not first.done()
    assert (await first).first_offset == 0
    await asyncio.sleep(0)  # the task waits for work again
    lone = writer.submit_append(make_batch(0, 3))
    assert lone.done()
    assert lone.result().first_offset == 2
    # behind a queued call, an append waits its turn (order is submission order)
    call = writer.submit_call(lambda log: log.next_offset)
    queued = writer.submit_append(make_batch(0, 1))
    assert not queued.done()
    assert (await call, (await queued).first_offset) == (5, 5)
    await writer.close()


async def test_flush_always_appends_never_skip_the_group_commit(tmp_path: Path) -> None:
    writer = LogWriter(Log.open(tmp_path, ALWAYS))
    await writer.append(make_batch(0, 1))
    await asyncio.sleep(0)
    pending = writer.submit_append(make_batch(0, 1))
    assert not pending.done()  # acknowledged only once synced, by the task
    assert (await pending).first_offset == 1
    assert writer.log.unflushed_bytes == 0
    await writer.close()

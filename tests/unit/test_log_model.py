"""A partition :class:`Log` held against a Python list of batches (Hypothesis stateful).

The model is the list of batches physically in the log (oldest first, each with
the bytes a leader stores: baseOffset and leader epoch rewritten), the log
start offset, and the log start offset the last checkpoint made durable.
Segments are small (64 KiB) and sparse index entries dense, so rolls, index
lookups and segment boundaries are exercised on every run.

Besides read-back, a :class:`~storage_helpers.TrackingIO` seam checks the
durability ordering that a power cut would expose: a recovery checkpoint may
only trust a segment (``base < recover_from``, or all of them when clean) whose
log and index files have no unsynced write, and after ``flush()`` no segment
file holds unsynced data. A "crash" drops the log without closing it (file
descriptors and maps released, nothing written), as ``kill -9`` would.
"""

from __future__ import annotations

import tempfile
from bisect import bisect_right
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from storage_helpers import (
    TrackingIO,
    as_stored,
    check_self_describing,
    decode,
    make_batch,
    split_batches,
)

from mq.errors import MQError, OffsetOutOfRangeError, RecordTooLargeError
from mq.storage.config import KiB, LogConfig
from mq.storage.log import Log

START_MS = 1_700_000_000_000
RETENTION_MS = 60_000


@dataclass(frozen=True)
class Stored:
    base: int
    data: bytes
    count: int
    max_ts: int

    @property
    def last(self) -> int:
        return self.base + self.count - 1

    @property
    def next(self) -> int:
        return self.base + self.count


class CheckingIO(TrackingIO):
    """Checks, before each checkpoint is written, that it only trusts synced files."""

    def on_checkpoint(self, path: Path, data: bytes) -> None:
        recover_from, clean, _ = (int(f) for f in data.decode().split("\n")[1].split())
        for file in path.parent.iterdir():
            stem, _, suffix = file.name.partition(".")
            if suffix not in ("log", "index", "timeindex"):
                continue
            if clean or int(stem) < recover_from:
                assert file not in self.dirty, (
                    f"checkpoint {data!r} trusts {file.name}, which has unsynced writes"
                )


Spec = tuple[int, int, int, int]
batch_specs = st.tuples(
    st.integers(1, 12),  # records
    st.sampled_from([0, 1, 40, 300, 1000, 3000]),  # value size
    st.integers(-2 * RETENTION_MS, 5_000),  # first timestamp, relative to the clock
    st.sampled_from([1, 0, -1, -7]),  # timestamp step between records
)


class LogMachine(RuleBasedStateMachine):
    @initialize(
        interval=st.sampled_from([64, 700, 4 * KiB]),
        retention_bytes=st.sampled_from([None, 150 * KiB]),
    )
    def open_log(self, interval: int, retention_bytes: int | None) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.directory = Path(self._tmp.name) / "topic-0"
        self.io = CheckingIO()
        self.now = START_MS
        self.config = LogConfig(
            segment_bytes=64 * KiB,
            segment_ms=300_000,
            index_interval_bytes=interval,
            max_message_bytes=48 * KiB,
            retention_ms=RETENTION_MS,
            retention_bytes=retention_bytes,
        )
        self.batches: list[Stored] = []
        self.first_base = 0
        self.log_start = 0
        self.durable_log_start = 0
        self.log = self._open(self.config)

    def teardown(self) -> None:
        try:
            log = getattr(self, "log", None)
            if log is not None:
                log.close()
        finally:
            self._tmp.cleanup()

    # -- helpers ----------------------------------------------------------------

    def _open(self, config: LogConfig) -> Log:
        log = Log.open(self.directory, config, io=self.io, clock=lambda: self.now)
        self.durable_log_start = log.log_start_offset  # the open writes a checkpoint
        return log

    @property
    def next_offset(self) -> int:
        return self.batches[-1].next if self.batches else self.first_base

    def _append(self, specs: list[Spec], epoch: int) -> None:
        datas = []
        expected = []
        offset = self.next_offset
        for count, value_size, ts, step in specs:
            first_ts = self.now + ts
            raw = make_batch(offset, count, timestamp=first_ts, value_size=value_size, step=step)
            datas.append(raw)
            max_ts = max(first_ts, first_ts + (count - 1) * step)
            expected.append(Stored(offset, as_stored(raw, offset, epoch), count, max_ts))
            offset += count
        data = b"".join(datas)
        if any(len(d) > self.config.max_message_bytes for d in datas):
            with pytest.raises(RecordTooLargeError):
                self.log.append(data, leader_epoch=epoch)
            return
        # batches larger together than a segment are split across segments
        info = self.log.append(data, leader_epoch=epoch)
        assert (info.first_offset, info.last_offset) == (expected[0].base, expected[-1].last)
        assert info.max_timestamp == max(s.max_ts for s in expected)
        assert info.batches == len(expected)
        self.batches.extend(expected)
        self.io.touch(self.log.segments[-1].path)  # written through the map

    def _bases(self) -> list[int]:
        return [s.base_offset for s in self.log.segments]

    def _segment_groups(self, bases: list[int]) -> list[list[Stored]]:
        groups: list[list[Stored]] = [[] for _ in bases]
        for b in self.batches:
            groups[bisect_right(bases, b.base) - 1].append(b)
        return groups

    def _drop_segments(self, bases: list[int], doomed: int) -> None:
        if doomed:
            self.first_base = bases[doomed]
            self.batches = [b for b in self.batches if b.base >= self.first_base]
            self.log_start = max(self.log_start, self.first_base)

    def _check_read(self, offset: int, max_bytes: int, upper: int | None) -> int | None:
        """Read and compare with the model; returns the offset after what was read."""
        got = self.log.read(offset, max_bytes, upper)
        bound = self.next_offset if upper is None else min(upper, self.next_offset)
        j = next((n for n, b in enumerate(self.batches) if b.last >= offset), None)
        allowed: list[Stored] = []
        if j is not None and offset < bound:
            size = 0
            for b in self.batches[j:]:
                if b.next > bound or (allowed and size + len(b.data) > max_bytes):
                    break
                allowed.append(b)
                size += len(b.data)
        if not allowed:
            assert got is None, (offset, max_bytes, upper, got)
            return None
        assert got is not None, (offset, max_bytes, upper)
        parts = split_batches(got.data)
        assert 1 <= len(parts) <= len(allowed)
        assert parts == [b.data for b in allowed[: len(parts)]]
        if len(parts) < len(allowed):  # a read stops only at a segment's end
            assert allowed[len(parts)].base in self._bases()
        assert got.first_offset == allowed[0].base
        assert got.next_offset == allowed[len(parts) - 1].next
        assert allowed[0].base <= offset <= allowed[0].last
        for part in parts:
            check_self_describing(part)
        return got.next_offset

    def _check_everything(self) -> None:
        offset = self.log_start
        while offset < self.next_offset:
            after = self._check_read(offset, 1, None)
            assert after is not None
            assert after > offset
            offset = after
        self._check_out_of_range()

    def _check_out_of_range(self) -> None:
        if self.log_start > 0:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(self.log_start - 1, 1 << 20)
        with pytest.raises(OffsetOutOfRangeError):
            self.log.read(self.next_offset + 1, 1 << 20)

    def _assert_synced(self) -> None:
        segments = self.log.segments
        for seg in segments:
            assert seg.path not in self.io.dirty, f"{seg.path.name} has unsynced data"
        for seg in segments[:-1]:
            for index in (seg.offset_index, seg.time_index):
                assert index.path not in self.io.dirty, f"{index.path.name} is not synced"

    # -- rules ------------------------------------------------------------------

    @rule(specs=st.lists(batch_specs, min_size=1, max_size=3), epoch=st.integers(0, 5))
    def append(self, specs: list[Spec], epoch: int) -> None:
        self._append(specs, epoch)

    @rule(bursts=st.lists(st.lists(batch_specs, min_size=1, max_size=2), min_size=2, max_size=12))
    def append_burst(self, bursts: list[list[Spec]]) -> None:
        """Several appends in a row, so that segments roll within a few steps."""
        for specs in bursts:
            self._append(specs, 1)

    @rule(corrupt_at=st.integers(21, 60))
    def append_corrupt_batch(self, corrupt_at: int) -> None:
        """A batch failing its CRC is refused; the log is unchanged and stays online."""
        raw = bytearray(make_batch(self.next_offset, 2))
        raw[corrupt_at] ^= 0x40
        with pytest.raises(MQError):
            self.log.append(bytes(raw))
        assert self.log.offline is None

    @rule(data=st.data(), max_bytes=st.sampled_from([1, 100, 3000, 20_000, 1 << 20]))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(self.log_start, self.next_offset), label="offset")
        upper = data.draw(
            st.one_of(st.none(), st.integers(self.log_start, self.next_offset + 3)), label="upper"
        )
        self._check_read(offset, max_bytes, upper)

    @rule()
    def flush(self) -> None:
        self.log.flush()
        self.durable_log_start = self.log_start
        self._assert_synced()

    @rule(specs=st.lists(batch_specs, min_size=1, max_size=6))
    def flush_while_appending(self, specs: list[Spec]) -> None:
        """Appends (and rolls) between begin_flush and end_flush, as with a sync in a thread."""
        job = self.log.begin_flush()
        self._append(specs, 0)
        if job is not None:
            job.run()
            self.log.end_flush(job)
        self.log.flush()
        self.durable_log_start = self.log_start
        self._assert_synced()

    @rule(segment_kib=st.sampled_from([64, 96, 128]))
    def close_and_reopen(self, segment_kib: int) -> None:
        self.log.close()
        self._assert_synced()
        # a smaller segment.bytes than the last segment holds must not cut it
        self.config = replace(self.config, segment_bytes=segment_kib * KiB)
        self.log = self._open(self.config)
        assert self.log.log_start_offset == self.log_start
        self._check_everything()

    @rule(flush_first=st.booleans())
    def crash_and_reopen(self, flush_first: bool) -> None:
        if flush_first:
            self.flush()
        for seg in self.log.segments:
            seg.abandon()  # kill -9: no trim, no index write, no checkpoint
        del self.log
        self.log = self._open(self.config)
        # only the log start offset lives in the checkpoint; the data is in the page cache
        self.log_start = max(self.durable_log_start, self.first_base)
        assert self.log.log_start_offset == self.log_start
        self._check_everything()

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(max(0, self.first_base - 2), self.next_offset + 2))
        if offset < self.next_offset:
            # the segment holding ``offset`` is zeroed through the map from there on
            bases = self._bases()
            self.io.touch(self.log.segments[max(bisect_right(bases, offset) - 1, 0)].path)
        self.log.truncate_to(offset)
        if offset >= self.next_offset:
            return
        if offset <= self.log_start:
            self.batches = []
            self.first_base = self.log_start = offset
        else:  # whole batches only: the one holding ``offset`` goes too
            self.batches = [b for b in self.batches if b.last < offset]
            # the log start cannot stay above the log end
            self.log_start = min(self.log_start, self.next_offset)
        self.durable_log_start = self.log_start  # truncation writes the checkpoint
        # a truncation is durable when it returns: dropped batches never come back
        assert self.log.segments[-1].path not in self.io.dirty
        self._check_everything()

    @rule(ms=st.integers(1, 40_000))
    def advance_clock(self, ms: int) -> None:
        self.now += ms

    @rule()
    def enforce_retention(self) -> None:
        cfg = self.config
        bases = self._bases()
        groups = self._segment_groups(bases)
        sizes = [sum(len(b.data) for b in g) for g in groups]
        newest = [max((b.max_ts for b in g), default=-1) for g in groups]
        assert cfg.retention_ms is not None
        if sizes[-1] and self.now - newest[-1] > cfg.retention_ms:
            bases.append(self.next_offset)  # the active segment expired: the log rolls
            sizes.append(0)
        total = sum(sizes)
        doomed = 0
        for k in range(len(bases) - 1):
            too_old = self.now - newest[k] > cfg.retention_ms
            too_big = cfg.retention_bytes is not None and total - sizes[k] >= cfg.retention_bytes
            if not (too_old or too_big):
                break
            total -= sizes[k]
            doomed += 1
        assert self.log.enforce_retention() == doomed
        self._drop_segments(bases, doomed)
        self._check_everything()

    @rule(data=st.data())
    def advance_log_start(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(max(0, self.log_start - 2), self.next_offset + 2))
        if offset > self.next_offset:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.advance_log_start(offset)
            return
        bases = self._bases()
        self.log.advance_log_start(offset)
        if offset <= self.log_start:
            return
        doomed = 0
        while doomed < len(bases) - 1 and bases[doomed + 1] <= offset:
            doomed += 1
        self._drop_segments(bases, doomed)
        self.log_start = offset
        self._check_everything()

    @precondition(lambda self: bool(self.batches))
    @rule(data=st.data())
    def offset_for_timestamp(self, data: st.DataObject) -> None:
        stamps = [rec.timestamp for b in self.batches for rec in decode(b.data)]
        target = data.draw(
            st.one_of(st.sampled_from(stamps), st.integers(min(stamps) - 2, max(stamps) + 2))
        )
        expected = next(
            (
                (rec.offset, rec.timestamp)
                for b in self.batches
                for rec in decode(b.data)
                if rec.offset >= self.log_start and rec.timestamp >= target
            ),
            None,
        )
        assert self.log.offset_for_timestamp(target) == expected

    # -- invariants -------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        log = self.log
        assert log.offline is None
        assert log.next_offset == self.next_offset
        assert log.log_start_offset == self.log_start
        assert self.log_start <= self.next_offset
        assert log.size_bytes == sum(len(b.data) for b in self.batches)
        bases = self._bases()
        assert bases == sorted(set(bases))
        assert bases[0] == self.first_base
        for seg, group in zip(log.segments, self._segment_groups(bases), strict=True):
            assert seg.size == sum(len(b.data) for b in group)
            assert seg.next_offset == (group[-1].next if group else seg.base_offset)


TestLogModel = LogMachine.TestCase
TestLogModel.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- cases the model found, kept as plain examples ----------------------------------------


def test_a_roll_during_a_sync_job_does_not_count_the_new_segment_as_synced(
    tmp_path: Path,
) -> None:
    """The job synced the old active file; the new one's bytes are still dirty.

    The new segment is made exactly as long as the old one was when the job was
    snapshotted, which is when crediting by size alone goes wrong.
    """
    io = TrackingIO()
    config = LogConfig(segment_bytes=64 * KiB, max_message_bytes=32 * KiB)
    log = Log.open(tmp_path, config, io=io)
    batch = make_batch(0, 1, value_size=1000)
    per_segment = config.segment_bytes // len(batch)
    for _ in range(3):
        log.append(batch)
    job = log.begin_flush()
    assert job is not None
    for _ in range(per_segment):
        log.append(batch)
    active = log.segments[-1]
    assert len(log.segments) == 2
    assert active.size == 3 * len(batch) == job.active_size
    io.touch(active.path)
    job.run()
    log.end_flush(job)
    assert log.unflushed_bytes >= active.size
    log.flush()
    assert active.path not in io.dirty
    assert log.unflushed_bytes == 0
    log.close()


def test_offset_for_timestamp_looks_past_a_batch_cut_by_the_log_start(tmp_path: Path) -> None:
    """The first batch new enough straddles the log start, and only hidden records qualify."""
    log = Log.open(tmp_path, LogConfig(segment_bytes=64 * KiB, max_message_bytes=32 * KiB))
    log.append(make_batch(0, 4, timestamp=START_MS + 100))  # offsets 0-3, stamped +100..+103
    log.append(make_batch(4, 2, timestamp=START_MS + 50))  # offsets 4-5, stamped +50, +51
    log.append(make_batch(6, 2, timestamp=START_MS + 200))  # offsets 6-7
    log.advance_log_start(3)
    assert log.offset_for_timestamp(START_MS + 103) == (3, START_MS + 103)
    log.advance_log_start(4)
    assert log.offset_for_timestamp(START_MS + 60) == (6, START_MS + 200)
    assert log.offset_for_timestamp(START_MS + 50) == (4, START_MS + 50)
    # stamps falling within a batch: offsets 8-11 are stamped +303, +302, +301, +300
    log.append(make_batch(8, 4, timestamp=START_MS + 303, step=-1))
    log.append(make_batch(12, 1, timestamp=START_MS + 400))
    log.advance_log_start(10)
    assert log.offset_for_timestamp(START_MS + 302) == (12, START_MS + 400)
    assert log.offset_for_timestamp(START_MS + 301) == (10, START_MS + 301)
    log.close()


def test_truncating_below_the_log_start_keeps_the_start_at_or_below_the_end(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path, LogConfig(segment_bytes=64 * KiB, max_message_bytes=32 * KiB))
    log.append(make_batch(0, 10))
    log.advance_log_start(5)
    log.truncate_to(7)  # whole batches only: the log ends at 0 now
    assert log.next_offset == 0
    assert log.log_start_offset == 0
    info = log.append(make_batch(0, 2))
    got = log.read(info.first_offset, 1 << 20)
    assert got is not None
    assert got.first_offset == 0
    log.close()


def test_batches_larger_together_than_a_segment_are_split_across_segments(
    tmp_path: Path,
) -> None:
    """A produce request may carry several batches of one partition (mq's producer does)."""
    log = Log.open(tmp_path, LogConfig(segment_bytes=64 * KiB, max_message_bytes=32 * KiB))
    batches = [make_batch(i * 10, 10, value_size=2500) for i in range(5)]  # ~25 KiB each
    info = log.append(b"".join(batches), leader_epoch=3)
    assert (info.first_offset, info.last_offset, info.batches) == (0, 49, 5)
    assert len(log.segments) == 3
    read = b""
    offset = 0
    while (found := log.read(offset, 1 << 20)) is not None:
        read += bytes(found.data)
        offset = found.next_offset
    assert read == b"".join(as_stored(b, i * 10, 3) for i, b in enumerate(batches))
    log.close()

"""Recovery of a partition log after an unclean stop, a torn tail or a flipped byte.

Each test writes a log of a few 64 KiB segments, stops it uncleanly (file
descriptors and maps dropped, nothing trimmed or written, as ``kill -9``),
damages the files, reopens it and reads everything back. The expected outcome
is computed from where each batch was written, never from the log under test.

What recovery promises: the readable log is exactly the batches before the
first damaged one; a damaged batch is never served; when the damage is in a
segment the checkpoint does not vouch for, the log is truncated there with a
warning saying how many bytes went; in an older, trusted segment reads of the
damaged batch fail with :class:`CorruptRecordError` and nothing else is lost.

Bytes 0-7 (baseOffset) and 12-15 (partitionLeaderEpoch) of a batch are outside
its CRC by the format's design; damage there has its own tests below.
"""

from __future__ import annotations

import logging
import os
import random
import re
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from storage_helpers import as_stored, check_self_describing, make_batch, split_batches

from mq.errors import CorruptRecordError
from mq.storage.checkpoint import FILE_NAME, read_checkpoint
from mq.storage.config import KiB, LogConfig
from mq.storage.fileio import DEFAULT_IO
from mq.storage.log import Log
from mq.storage.segment import Segment

CONFIG = LogConfig(segment_bytes=64 * KiB, index_interval_bytes=512, max_message_bytes=32 * KiB)
TS = 1_700_000_000_000
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@dataclass(frozen=True)
class Placed:
    """A batch as written: its bytes on disk and where they are."""

    base: int
    count: int
    data: bytes
    segment: int
    position: int

    @property
    def next(self) -> int:
        return self.base + self.count


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name) / "t-0"


def unclean_stop(log: Log) -> None:
    """Drop the log as a killed process would: no trim, no index write, no checkpoint."""
    for segment in log.segments:
        segment.abandon()


def write_log(
    directory: Path,
    sizes: list[tuple[int, int]],
    *,
    flush_after: int | None = None,
    config: LogConfig = CONFIG,
    clean: bool = False,
) -> list[Placed]:
    """Append one batch per (records, value size), flushing after batch ``flush_after``."""
    log = Log.open(directory, config)
    offsets: list[tuple[int, int, bytes]] = []
    for n, (count, value_size) in enumerate(sizes):
        raw = make_batch(log.next_offset, count, timestamp=TS + 10 * n, value_size=value_size)
        info = log.append(raw)
        offsets.append((info.first_offset, count, as_stored(raw, info.first_offset)))
        if n == flush_after:
            log.flush()
    bases = [s.base_offset for s in log.segments]
    if clean:
        log.close()
    else:
        unclean_stop(log)
    placed = []
    position = 0
    segment = 0
    for base, count, data in offsets:
        if segment + 1 < len(bases) and base >= bases[segment + 1]:
            segment += 1
            position = 0
        placed.append(Placed(base, count, data, bases[segment], position))
        position += len(data)
    return placed


def seg_path(directory: Path, base: int, suffix: str = ".log") -> Path:
    return directory / f"{base:020d}{suffix}"


def read_all(log: Log, *, max_bytes: int = 1) -> list[bytes]:
    """Every batch from the log start to the end, one read per batch."""
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.next_offset:
        got = log.read(offset, max_bytes)
        assert got is not None
        assert got.first_offset <= offset < got.next_offset
        parts = split_batches(got.data)
        out.extend(parts)
        offset = got.next_offset
    return out


def assert_exactly(log: Log, expected: list[Placed]) -> None:
    assert log.next_offset == (expected[-1].next if expected else 0)
    got = read_all(log)
    assert got == [p.data for p in expected]
    for batch in got:
        check_self_describing(batch)
    for p in expected:  # every offset finds the batch that holds it
        for offset in {p.base, p.next - 1}:
            found = log.read(offset, 1)
            assert found is not None
            assert bytes(found.data) == p.data


def dropped_in(caplog: pytest.LogCaptureFixture) -> list[int]:
    return [
        int(m.group(1))
        for r in caplog.records
        if r.levelno == logging.WARNING and (m := re.search(r"dropped (\d+) bytes", r.getMessage()))
    ]


sizes_st = st.lists(
    st.tuples(st.integers(1, 8), st.sampled_from([1, 30, 200, 900, 2500, 4000])),
    min_size=30,
    max_size=100,
)


# -- a torn tail --------------------------------------------------------------------


@SETTINGS
@given(sizes=sizes_st, data=st.data())
def test_truncated_active_segment_keeps_whole_batches(
    sizes: list[tuple[int, int]], data: st.DataObject, caplog: pytest.LogCaptureFixture
) -> None:
    with scratch() as directory:
        placed = write_log(directory, sizes)
        active = placed[-1].segment
        in_active = [p for p in placed if p.segment == active]
        end = in_active[-1].position + len(in_active[-1].data)
        cut = data.draw(st.integers(0, end + 100), label="cut")
        path = seg_path(directory, active)
        raw = path.read_bytes()[:cut]
        os.truncate(path, cut)

        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mq.storage"):
            log = Log.open(directory, CONFIG)
        survivors = [p for p in placed if p.segment != active or p.position + len(p.data) <= cut]
        assert_exactly(log, survivors)
        first_lost = next((p for p in in_active if p.position + len(p.data) > cut), None)
        if first_lost is not None:
            torn = raw[first_lost.position :].rstrip(b"\0")
            assert dropped_in(caplog) == ([len(torn)] if torn else [])
            assert log.next_offset == first_lost.base
        # the log takes appends where it ends, and they survive the next crash
        raw_next = make_batch(log.next_offset, 2)
        info = log.append(raw_next)
        unclean_stop(log)
        log = Log.open(directory, CONFIG)
        assert read_all(log)[-1] == as_stored(raw_next, info.first_offset)
        log.close()


# -- a flipped byte -------------------------------------------------------------------


def crc_covered(draw: st.DrawFn, batch_size: int) -> int:
    """A byte of a batch that its length, magic or CRC check covers."""
    return draw(st.one_of(st.integers(8, 11), st.integers(16, batch_size - 1)))


@settings(SETTINGS, max_examples=100)
@given(sizes=sizes_st, data=st.data())
def test_flipped_byte_is_never_served(
    sizes: list[tuple[int, int]], data: st.DataObject, caplog: pytest.LogCaptureFixture
) -> None:
    with scratch() as directory:
        n = len(sizes)
        flush_after = data.draw(st.sampled_from([None, n // 3, n // 2, 3 * n // 4, n - 1]))
        placed = write_log(directory, sizes, flush_after=flush_after)
        checkpoint = read_checkpoint(directory, DEFAULT_IO)
        assert checkpoint is not None
        assert not checkpoint.clean
        segment = data.draw(st.sampled_from(sorted({p.segment for p in placed})))
        victim = data.draw(st.sampled_from([p for p in placed if p.segment == segment]))
        at = data.draw(st.composite(lambda d: crc_covered(d, len(victim.data)))(), label="at")
        mask = data.draw(st.integers(1, 255), label="mask")
        path = seg_path(directory, victim.segment)
        raw = bytearray(path.read_bytes())
        raw[victim.position + at] ^= mask
        path.write_bytes(raw)

        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mq.storage"):
            log = Log.open(directory, CONFIG)
        before = [p for p in placed if p.base < victim.base]
        trusted = victim.segment < checkpoint.recover_from
        walk_failed = any("header walk" in r.getMessage() for r in caplog.records)
        event("trusted segment" if trusted else "recovered segment")
        event(f"header walk failed: {walk_failed}")
        if not trusted or walk_failed:
            # recovery truncates at the damaged batch and deletes what follows (a
            # trusted segment is recovered so when the batches that end its offsets
            # are damaged)
            assert trusted or not walk_failed
            assert_exactly(log, before)
            assert log.next_offset == victim.base
            tail = bytes(raw[victim.position :]).rstrip(b"\0")
            assert dropped_in(caplog) == [len(tail)]
            later = {p.segment for p in placed if p.segment > victim.segment}
            for base in later:
                assert not seg_path(directory, base).exists()
        else:
            # a trusted segment is not re-checked: the damaged batch is refused on read
            assert log.next_offset == placed[-1].next
            assert read_all_until(log, victim.base) == [p.data for p in before]
            for offset in (victim.base, victim.next - 1):
                with pytest.raises(CorruptRecordError):
                    log.read(offset, 1 << 20)
            after = [p for p in placed if p.base > victim.base]
            check_never_wrong(log, after, victim.segment)
        log.close()


@SETTINGS
@given(sizes=sizes_st, data=st.data())
def test_zeros_where_a_sealed_segment_had_data_end_the_log(
    sizes: list[tuple[int, int]], data: st.DataObject, caplog: pytest.LogCaptureFixture
) -> None:
    """A power cut can keep a sealed file's length but lose its data (zeros).

    Recovery must end the log at the first lost batch, not carry on with the
    next segment and leave a hole of offsets that no read can ever fill.
    """
    with scratch() as directory:
        placed = write_log(directory, sizes)  # nothing synced: every segment is re-checked
        sealed = sorted({p.segment for p in placed})[:-1]
        if not sealed:
            return
        segment = data.draw(st.sampled_from(sealed), label="segment")
        victim = data.draw(st.sampled_from([p for p in placed if p.segment == segment]))
        path = seg_path(directory, segment)
        raw = path.read_bytes()
        path.write_bytes(raw[: victim.position] + bytes(len(raw) - victim.position))

        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mq.storage"):
            log = Log.open(directory, CONFIG)
        assert_exactly(log, [p for p in placed if p.base < victim.base])
        assert any("zero bytes" in r.getMessage() for r in caplog.records)
        for base in {p.segment for p in placed if p.segment > segment}:
            assert not seg_path(directory, base).exists()
        log.close()


def read_all_until(log: Log, stop: int) -> list[bytes]:
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < stop:
        got = log.read(offset, 1 << 20, stop)
        assert got is not None
        out.extend(split_batches(got.data))
        offset = got.next_offset
    return out


def check_never_wrong(log: Log, batches: list[Placed], damaged_segment: int) -> None:
    """Later batches read back intact; in the damaged segment a read may fail instead."""
    for p in batches:
        if p.segment == damaged_segment:
            try:
                found = log.read(p.base, 1)
            except CorruptRecordError:
                continue
        else:
            found = log.read(p.base, 1)
        assert found is not None
        assert split_batches(found.data)[0] == p.data


def test_length_flip_cannot_make_a_read_skip_a_batch(tmp_path: Path) -> None:
    """A length field damaged to span exactly two batches must not hide the second one.

    Every batch is 128 bytes; the length of batch 3 gets bit 7 flipped, so a
    walk that trusts it lands exactly on batch 5. Reading an offset of batch 4
    must give batch 4 or fail, never batch 5.
    """
    config = LogConfig(
        segment_bytes=64 * KiB, index_interval_bytes=32 * KiB, max_message_bytes=32 * KiB
    )
    value_size = next(v for v in range(100) if len(make_batch(0, 1, value_size=v)) == 128)
    placed = write_log(tmp_path, [(1, value_size)] * 40, config=config, clean=True)
    assert all(len(p.data) == 128 for p in placed)
    path = seg_path(tmp_path, 0)
    raw = bytearray(path.read_bytes())
    raw[3 * 128 + 11] ^= 0x80
    path.write_bytes(raw)
    log = Log.open(tmp_path, config)
    assert log.next_offset == 40  # the damage is before the last index entry: not noticed
    for offset in (4, 5):
        try:
            found = log.read(offset, 1)
        except CorruptRecordError:
            continue
        assert found is not None
        assert split_batches(found.data)[0] == placed[offset].data
    log.close()


def test_damaged_end_of_a_trusted_segment_does_not_move_the_offsets(tmp_path: Path) -> None:
    """The last batch of a trusted segment says where its offsets end; check it whole.

    Its lastOffsetDelta gets 2**24 added by one flipped bit: trusted blindly,
    the next segment would look like an overlap and the log would jump ahead.
    """
    placed = write_log(tmp_path, [(4, 2500)] * 30, flush_after=29)
    bases = sorted({p.segment for p in placed})
    assert len(bases) >= 3
    victim = [p for p in placed if p.segment == bases[0]][-1]
    path = seg_path(tmp_path, victim.segment)
    raw = bytearray(path.read_bytes())
    raw[victim.position + 23] ^= 0x01
    path.write_bytes(raw)
    log = Log.open(tmp_path, CONFIG)
    assert log.next_offset <= placed[-1].next
    assert read_all(log) == [p.data for p in placed if p.base < log.next_offset]
    assert log.next_offset == victim.base  # recovered: the log ends before the damage
    log.close()


@pytest.mark.parametrize("byte", [0, 1, 2, 3])
def test_base_offset_far_out_of_the_segment_is_dropped(tmp_path: Path, byte: int) -> None:
    """baseOffset is outside the CRC; a jump past the segment's u32 range is still damage."""
    placed = write_log(tmp_path, [(3, 100)] * 30)
    victim = placed[-5]
    path = seg_path(tmp_path, victim.segment)
    raw = bytearray(path.read_bytes())
    raw[victim.position + byte] ^= 0x01
    path.write_bytes(raw)
    log = Log.open(tmp_path, CONFIG)
    assert log.next_offset == victim.base
    assert_exactly(log, [p for p in placed if p.base < victim.base])
    log.close()


@pytest.mark.parametrize("byte", [0, 3])
def test_base_offset_damage_in_a_trusted_segment_is_not_served(tmp_path: Path, byte: int) -> None:
    placed = write_log(tmp_path, [(3, 100)] * 30, clean=True)
    victim = placed[3]
    path = seg_path(tmp_path, victim.segment)
    raw = bytearray(path.read_bytes())
    raw[victim.position + byte] ^= 0x01
    path.write_bytes(raw)
    log = Log.open(tmp_path, CONFIG)
    with pytest.raises(CorruptRecordError):
        log.read(victim.base, 1)
    assert read_all_until(log, victim.base) == [p.data for p in placed[:3]]
    log.close()


def test_leader_epoch_is_outside_the_crc(tmp_path: Path) -> None:
    """Damage to partitionLeaderEpoch cannot be detected (the format's choice, as Kafka)."""
    placed = write_log(tmp_path, [(2, 50)] * 10)
    victim = placed[4]
    path = seg_path(tmp_path, victim.segment)
    raw = bytearray(path.read_bytes())
    raw[victim.position + 13] ^= 0x10
    path.write_bytes(raw)
    log = Log.open(tmp_path, CONFIG)
    assert log.next_offset == placed[-1].next
    got = read_all(log)
    assert got[4] != victim.data
    assert got[4][16:] == victim.data[16:]
    log.close()


# -- indexes and checkpoints ----------------------------------------------------------


def damage_index(path: Path, how: str, rng: random.Random, other: Path | None) -> None:
    if how == "missing":
        path.unlink(missing_ok=True)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(rng.randbytes(rng.choice([3, 8, 16, 64, 200])))
    elif how == "partial" and path.exists():
        raw = path.read_bytes()
        path.write_bytes(raw[: max(0, len(raw) - rng.randint(1, 7))])
    elif how == "foreign" and other is not None and other.exists():
        path.write_bytes(other.read_bytes())


@SETTINGS
@given(
    sizes=sizes_st,
    how=st.sampled_from(["missing", "empty", "garbage", "partial", "foreign"]),
    clean=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_damaged_index_files_are_rebuilt(
    sizes: list[tuple[int, int]], how: str, clean: bool, seed: int
) -> None:
    rng = random.Random(seed)
    with scratch() as directory:
        placed = write_log(directory, sizes, flush_after=len(sizes) - 1, clean=clean)
        bases = sorted({p.segment for p in placed})
        for base in bases:
            other = seg_path(directory, rng.choice(bases), ".index")
            for suffix in (".index", ".timeindex"):
                if rng.random() < 0.7:
                    damage_index(seg_path(directory, base, suffix), how, rng, other)
        log = Log.open(directory, CONFIG)
        assert_exactly(log, placed)
        check_time_lookups(log, placed)
        for segment in log.segments[:-1]:  # rebuilt indexes were written back
            check_index_file(segment)
        log.close()
        log = Log.open(directory, CONFIG)
        assert_exactly(log, placed)
        log.close()


def check_time_lookups(log: Log, placed: list[Placed]) -> None:
    # batch n holds records stamped TS + 10n + i: the first record at or after
    # TS + 10n is the first record of batch n
    for n in range(0, len(placed), 3):
        assert log.offset_for_timestamp(TS + 10 * n) == (placed[n].base, TS + 10 * n)
    assert log.offset_for_timestamp(TS + 10 * len(placed) + 100) is None


def check_index_file(segment: Segment) -> None:
    for index, entry in ((segment.offset_index, 8), (segment.time_index, 12)):
        raw = index.path.read_bytes()
        assert len(raw) == entry * len(index)
        fmt = ">II" if entry == 8 else ">qI"
        assert list(struct.iter_unpack(fmt, raw)) == list(
            zip(index.keys, index.values, strict=True)
        )


@pytest.mark.parametrize("damage", ["missing", "garbage", "wrong-numbers", "clean-but-lying"])
def test_bad_checkpoint_means_a_full_check_and_no_loss(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    sizes = [(4, 900)] * 60
    placed = write_log(tmp_path, sizes, flush_after=30)
    checkpoint = tmp_path / FILE_NAME
    if damage == "missing":
        checkpoint.unlink()
    elif damage == "garbage":
        checkpoint.write_bytes(b"\x00\xffnot a checkpoint\n1 2\n")
    elif damage == "wrong-numbers":
        checkpoint.write_bytes(b"mq-log-checkpoint 1\n12 0 x\n")
    else:  # says clean though the active segment is preallocated and untrimmed
        checkpoint.write_bytes(b"mq-log-checkpoint 1\n0 1 0\n")
    with caplog.at_level(logging.WARNING, logger="mq.storage"):
        log = Log.open(tmp_path, CONFIG)
    assert_exactly(log, placed)
    assert dropped_in(caplog) == []
    log.close()


def test_leftover_tmp_files_are_removed(tmp_path: Path) -> None:
    placed = write_log(tmp_path, [(2, 100)] * 20)
    leftovers = [tmp_path / f"{FILE_NAME}.tmp", tmp_path / "00000000000000000000.index.tmp"]
    for path in leftovers:
        path.write_bytes(b"half written")
    orphan = tmp_path / f"{10**6:020d}.index"
    orphan.write_bytes(b"\x00" * 8)
    log = Log.open(tmp_path, CONFIG)
    for path in [*leftovers, orphan]:
        assert not path.exists()
    assert_exactly(log, placed)
    log.close()


def test_reopening_with_smaller_segments_keeps_the_data(tmp_path: Path) -> None:
    big = LogConfig(segment_bytes=256 * KiB, index_interval_bytes=512, max_message_bytes=32 * KiB)
    placed = write_log(tmp_path, [(8, 2500)] * 8, config=big, clean=True)
    assert sum(len(p.data) for p in placed) > CONFIG.segment_bytes
    log = Log.open(tmp_path, CONFIG)
    assert_exactly(log, placed)
    info = log.append(make_batch(log.next_offset, 1))
    assert len(log.segments) == 2  # the old segment is full under the new setting
    log.close()
    log = Log.open(tmp_path, CONFIG)
    assert log.next_offset == info.last_offset + 1
    assert read_all(log)[: len(placed)] == [p.data for p in placed]
    log.close()

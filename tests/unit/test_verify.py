"""mq.storage.verify against logs written by mq's Log and by kafka-python's encoder.

kafka-python's ``DefaultRecordBatchBuilder`` is an independent implementation
of RecordBatch v2, so a segment of its batches checks the header walk and CRC
against someone else's bytes, not only against our own writer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_batches import SEGMENT, T0, kafka_batch, kafka_segment, write_segment

from mq.records.batch import LENGTH_AT, MAGIC_AT, RECORDS_AT, set_base_offset
from mq.storage.config import LogConfig
from mq.storage.log import Log
from mq.storage.segment import RESERVE_AHEAD
from mq.storage.verify import BatchInfo, Damage, Padding, dump_segment, verify

COUNTS = [1, 3, 2, 5, 4]
"""Records per batch of the test segment (batch k holds COUNTS[k] records)."""
SEG, POSITIONS, BASES = kafka_segment(COUNTS)
SIZES = [b - a for a, b in zip(POSITIONS, [*POSITIONS[1:], len(SEG)], strict=True)]
K = range(len(COUNTS))
CONFIG = LogConfig(segment_bytes=64 * 1024, max_message_bytes=32 * 1024)
LOG_BATCHES = 400
"""Batches of 8 records appended through Log: about 180 KiB, three 64 KiB segments."""


# -- logs written by mq's own Log ------------------------------------------------


def test_a_log_written_by_log_verifies_ok(tmp_path: Path) -> None:
    partition = tmp_path / "orders-0"
    log = Log.open(partition, CONFIG)
    sizes = []
    for n in range(LOG_BATCHES):
        batch = kafka_batch(0, 8, T0 + n)
        log.append(batch)
        sizes.append(len(batch))
    log.close()
    segments = sorted(partition.glob("*.log"))
    assert len(segments) >= 3  # it rolled, so offsets are checked across segments

    for path in (partition, tmp_path):
        report = verify(path)
        assert report.ok, report.errors
        checked = (report.files, report.batches, report.bytes)
        assert checked == (len(segments), LOG_BATCHES, sum(sizes))
    dumped = [e for s in segments for e in dump_segment(s)]
    assert all(isinstance(e, BatchInfo) and e.crc_ok for e in dumped)
    offsets = [e.base_offset for e in dumped if isinstance(e, BatchInfo)]
    assert offsets == list(range(0, 8 * LOG_BATCHES, 8))


def test_a_live_log_has_zero_padding_that_is_not_damage(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    try:
        for n in range(3):
            log.append(kafka_batch(0, 2, T0 + n))
        log.flush()
        report = verify(tmp_path / "t-0")  # as after kill -9: the file is still preallocated
        entries = list(dump_segment(tmp_path / "t-0" / SEGMENT))
    finally:
        log.close()
    assert report.ok, report.errors
    assert report.batches == 3
    assert report.padding_bytes == 64 * 1024 - report.bytes > 0
    assert entries[-1] == Padding(report.bytes, report.padding_bytes)


# -- a segment of kafka-python batches ------------------------------------------


def test_a_kafka_python_segment_verifies_ok(tmp_path: Path) -> None:
    write_segment(tmp_path / "t-0", SEG)
    report = verify(tmp_path / "t-0" / SEGMENT)
    assert report.ok, report.errors
    checked = (report.files, report.batches, report.bytes, report.padding_bytes)
    assert checked == (1, len(COUNTS), len(SEG), 0)


def test_dump_describes_every_batch(tmp_path: Path) -> None:
    entries = list(dump_segment(write_segment(tmp_path, SEG)))
    assert all(isinstance(e, BatchInfo) for e in entries)
    got = [
        (e.position, e.size, e.base_offset, e.last_offset, e.records, e.crc_ok)
        for e in entries
        if isinstance(e, BatchInfo)
    ]
    want = [
        (POSITIONS[k], SIZES[k], BASES[k], BASES[k] + COUNTS[k] - 1, COUNTS[k], True) for k in K
    ]
    assert got == want
    first = entries[1]
    assert isinstance(first, BatchInfo)
    assert (first.base_timestamp, first.max_timestamp) == (T0 + 1000, T0 + 1002)
    assert (first.codec_name, first.producer_id, first.base_sequence) == ("none", -1, -1)


@pytest.mark.parametrize("k", K)
def test_a_flipped_record_byte_is_reported_at_its_batch(tmp_path: Path, k: int) -> None:
    data = bytearray(SEG)
    data[POSITIONS[k] + RECORDS_AT + 3] ^= 0x40
    path = write_segment(tmp_path / "t-0", data)

    report = verify(tmp_path)
    assert not report.ok
    bad = report.errors[0]
    where = (bad.path, bad.position, bad.offset, bad.offset_from_header)
    assert where == (path, POSITIONS[k], BASES[k], True)
    assert "CRC mismatch" in bad.reason
    assert report.batches == k
    # a CRC mismatch keeps boundaries: the dump goes on past it
    entries = list(dump_segment(path))
    assert [e.crc_ok for e in entries if isinstance(e, BatchInfo)] == [j != k for j in K]


@pytest.mark.parametrize(("k", "length"), [(0, 2_000_000), (2, 3), (4, -7), (3, 10_000)])
def test_a_broken_length_field_is_reported_at_its_batch(
    tmp_path: Path, k: int, length: int
) -> None:
    data = bytearray(SEG)
    at = POSITIONS[k] + LENGTH_AT
    data[at : at + 4] = length.to_bytes(4, "big", signed=True)
    path = write_segment(tmp_path, data)
    bad = verify(path).errors[0]
    assert (bad.position, bad.offset) == (POSITIONS[k], BASES[k])
    *good, damage = dump_segment(path)  # boundaries are lost: the walk stops there
    assert [e.position for e in good] == POSITIONS[:k]
    assert isinstance(damage, Damage)
    assert (damage.position, damage.base_offset) == (POSITIONS[k], BASES[k])


@pytest.mark.parametrize(("k", "keep"), [(4, 100), (2, 30), (3, 5), (0, 60), (1, 3)])
def test_a_file_cut_mid_batch_is_reported(tmp_path: Path, k: int, keep: int) -> None:
    # offsets from 2**40 make byte 2 of every baseOffset non-zero: even a 3-byte
    # stub of a header is data, not zero padding
    seg, positions, bases = kafka_segment(COUNTS, first=1 << 40)
    path = write_segment(tmp_path, seg[: positions[k] + keep])
    bad = verify(path).errors[0]
    assert (bad.position, bad.offset) == (positions[k], bases[k])
    # with under 8 bytes left even the baseOffset is gone: the expected offset stands in
    assert bad.offset_from_header == (keep >= 8)
    assert "past the end" in bad.reason or "bytes left" in bad.reason
    last = list(dump_segment(path))[-1]
    assert isinstance(last, Damage)
    assert last.position == positions[k]


def test_a_bad_magic_byte_stops_the_walk(tmp_path: Path) -> None:
    data = bytearray(SEG)
    data[POSITIONS[1] + MAGIC_AT] = 1
    path = write_segment(tmp_path, data)
    bad = verify(path).errors[0]
    assert (bad.position, bad.offset) == (POSITIONS[1], BASES[1])
    assert "magic" in bad.reason
    entries = list(dump_segment(path))
    assert [type(e) for e in entries] == [BatchInfo, Damage]


@pytest.mark.parametrize("padding", [1, 11, 12, 61, 5000])
def test_zero_padding_at_the_end_is_fine(tmp_path: Path, padding: int) -> None:
    path = write_segment(tmp_path, SEG + bytes(padding))
    report = verify(path)
    assert report.ok, report.errors
    assert (report.batches, report.bytes, report.padding_bytes) == (len(COUNTS), len(SEG), padding)
    assert list(dump_segment(path))[-1] == Padding(len(SEG), padding)


def test_a_wiped_header_followed_by_data_is_damage(tmp_path: Path) -> None:
    data = bytearray(SEG)
    data[POSITIONS[2] : POSITIONS[2] + RECORDS_AT] = bytes(RECORDS_AT)
    path = write_segment(tmp_path, data)
    bad = verify(path).errors[0]
    assert (bad.position, bad.offset, bad.offset_from_header) == (POSITIONS[2], BASES[2], False)
    assert "wiped" in bad.reason
    last = list(dump_segment(path))[-1]
    assert isinstance(last, Damage)
    assert last.position == POSITIONS[2]


def test_an_offset_going_back_in_a_segment_is_reported(tmp_path: Path) -> None:
    data = bytearray(SEG)
    set_base_offset(data, POSITIONS[3], BASES[3] - 1)
    bad = verify(write_segment(tmp_path, data)).errors[0]
    assert (bad.position, bad.offset) == (POSITIONS[3], BASES[3] - 1)
    assert "goes back" in bad.reason


@pytest.mark.parametrize("name", [10, 5])
def test_offsets_are_checked_across_segments(tmp_path: Path, name: int) -> None:
    first, _, _ = kafka_segment([4, 6])  # offsets 0..9
    write_segment(tmp_path / "t-0", first)
    second = write_segment(tmp_path / "t-0", kafka_segment([2], 10)[0], f"{name:020d}.log")
    assert verify(tmp_path).ok

    # overlaps the first segment: below its next offset (and maybe below its own name)
    second.write_bytes(bytes(kafka_segment([2], 7)[0]))
    bad = verify(tmp_path).errors[0]
    assert (bad.path, bad.position, bad.offset) == (second, 0, 7)
    assert "expected >= 10" in bad.reason


def test_a_first_batch_below_its_segment_name_is_reported(tmp_path: Path) -> None:
    path = write_segment(tmp_path / "t-0", kafka_segment([3], 95)[0], f"{100:020d}.log")
    bad = verify(tmp_path / "t-0").errors[0]
    assert (bad.path, bad.position, bad.offset) == (path, 0, 95)
    assert "expected >= 100" in bad.reason


def test_a_data_dir_reports_each_damaged_partition(tmp_path: Path) -> None:
    damaged = bytearray(SEG)
    damaged[POSITIONS[1] + RECORDS_AT] ^= 1
    write_segment(tmp_path / "a-0", SEG)
    bad_path = write_segment(tmp_path / "a-1", damaged)
    write_segment(tmp_path / "b-0", SEG)
    (tmp_path / "not-a-partition").mkdir()
    report = verify(tmp_path)
    assert [(e.path, e.position) for e in report.errors] == [(bad_path, POSITIONS[1])]
    assert report.first_error == report.errors[0]
    assert (report.files, report.batches) == (3, 2 * len(COUNTS) + 1)


def test_an_empty_directory_checks_nothing(tmp_path: Path) -> None:
    report = verify(tmp_path)
    assert (report.ok, report.files, report.batches) == (True, 0, 0)


# -- sparse padding ---------------------------------------------------------------

SPARSE_PARTITIONS = 40
"""Partitions of small data in preallocated 1 GiB segments, as a broker killed with -9
leaves them (the newcomer's ``mq-data``)."""
GIB = 1 << 30


def _unclosed_logs(root: Path, count: int) -> list[Log]:
    config = LogConfig(segment_bytes=GIB, max_message_bytes=32 * 1024)
    logs = []
    for p in range(count):
        log = Log.open(root / f"t-{p}", config)
        for n in range(3):
            log.append(kafka_batch(0, 2, T0 + n))
        log.flush()
        logs.append(log)
    return logs


def test_verify_reads_only_the_written_bytes_of_sparse_segments(tmp_path: Path) -> None:
    logs = _unclosed_logs(tmp_path, SPARSE_PARTITIONS)
    try:
        assert (tmp_path / "t-0" / SEGMENT).stat().st_size == GIB  # pre-sized, not trimmed
        report = verify(tmp_path)
    finally:
        for log in logs:
            log.close()
    assert report.ok, report.errors
    assert (report.files, report.batches) == (SPARSE_PARTITIONS, 3 * SPARSE_PARTITIONS)
    assert report.padding_bytes == SPARSE_PARTITIONS * GIB - report.bytes
    # at most the blocks reserved ahead of the write position (allocated, unwritten)
    assert report.padding_read <= SPARSE_PARTITIONS * RESERVE_AHEAD


def test_data_after_a_hole_is_still_damage(tmp_path: Path) -> None:
    (log,) = _unclosed_logs(tmp_path, 1)
    try:
        with open(tmp_path / "t-0" / SEGMENT, "r+b") as f:
            f.seek(GIB // 2)
            f.write(b"\x01")
        report = verify(tmp_path)
        entries = list(dump_segment(tmp_path / "t-0" / SEGMENT))
    finally:
        log.close()
    assert report.first_error is not None
    assert f"followed by data at byte {GIB // 2}" in report.first_error.reason
    assert isinstance(entries[-1], Damage)
    assert f"at byte {GIB // 2}" in entries[-1].reason

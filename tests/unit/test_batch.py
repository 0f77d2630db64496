"""Unit tests of the RecordBatch v2 header module, mq.records.batch.

Batches come from mq.records.records.build_batch; damaged ones are made by
rewriting header fields with a struct and a CRC written here, independently of
the module under test.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from crc32c import crc32c

from mq.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from mq.records import batch
from mq.records.records import build_batch, decode_records

HEADER = struct.Struct(">qiibIhiqqqhii")
FIELDS = batch.BatchHeader._fields


def make_batch(count: int = 3, *, base_offset: int = 0, ts: int = 1_000, **kw: Any) -> bytes:
    records = [(b"k%d" % i, b"value-%d" % i, [], ts + i) for i in range(count)]
    return build_batch(records, base_offset=base_offset, **kw)


def rewrite(buf: bytes, *, fix_crc: bool = True, **fields: int) -> bytes:
    """The batch with header fields replaced and, by default, its CRC made valid again."""
    values = dict(zip(FIELDS, HEADER.unpack_from(buf), strict=True)) | fields
    out = bytearray(buf)
    HEADER.pack_into(out, 0, *values.values())
    if fix_crc:
        struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def empty_batch() -> bytes:
    """A header-only batch with zero records, as log compaction can leave behind."""
    out = bytearray(61)
    HEADER.pack_into(out, 0, 0, 49, 0, 2, 0, 0, 0, 5, 5, -1, -1, -1, 0)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


# -- parse_header and check_batch ------------------------------------------------


def test_header_fields_match_what_was_built() -> None:
    buf = make_batch(
        3, base_offset=40, producer_id=7, producer_epoch=2, base_sequence=11, transactional=True
    )
    header = batch.check_batch(buf, 0, len(buf))
    assert header == batch.parse_header(buf)
    assert header.base_offset == 40
    assert header.size == len(buf) == batch.batch_size_at(buf)
    assert header.magic == 2
    assert header.crc == crc32c(buf[21:]) == batch.compute_crc(buf)
    assert (header.last_offset_delta, header.records_count) == (2, 3)
    assert (header.last_offset, header.next_offset) == (42, 43)
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_002)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 11)
    assert header.is_transactional
    assert not header.is_control
    assert header.codec == 0


def test_check_batch_at_an_offset_inside_a_larger_buffer() -> None:
    first, second = make_batch(2), make_batch(4, base_offset=2)
    buf = first + second + b"\xff" * 5
    header = batch.check_batch(buf, len(first), len(first) + len(second))
    assert (header.base_offset, header.records_count) == (2, 4)


@pytest.mark.parametrize("size", [0, 1, 12, 60])
def test_check_batch_rejects_fewer_bytes_than_a_header(size: int) -> None:
    with pytest.raises(CorruptRecordError, match="header needs 61"):
        batch.check_batch(make_batch()[:size], 0, size)


@pytest.mark.parametrize("length", [-1, 0, 48])
def test_check_batch_rejects_a_length_below_the_minimum(length: int) -> None:
    buf = rewrite(make_batch(), batch_length=length)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        batch.check_batch(buf, 0, len(buf))


def test_check_batch_rejects_a_batch_running_past_the_end() -> None:
    buf = make_batch()
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        batch.check_batch(buf[:-1], 0, len(buf) - 1)
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        batch.check_batch(buf, 0, len(buf) - 1)


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_check_batch_rejects_another_magic(magic: int) -> None:
    buf = rewrite(make_batch(), magic=magic)
    with pytest.raises(CorruptRecordError, match="magic byte"):
        batch.check_batch(buf, 0, len(buf))


@pytest.mark.parametrize("at", [21, 30, 61, -1])
def test_check_batch_rejects_a_flipped_bit_anywhere_the_crc_covers(at: int) -> None:
    buf = bytearray(make_batch())
    buf[at] ^= 0x04
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        batch.check_batch(buf, 0, len(buf))


def test_check_batch_rejects_a_wrong_stored_crc() -> None:
    good = make_batch()
    buf = rewrite(good, crc=batch.parse_header(good).crc ^ 1, fix_crc=False)
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        batch.check_batch(buf, 0, len(buf))


@pytest.mark.parametrize("field", ["last_offset_delta", "records_count"])
def test_check_batch_rejects_negative_counts(field: str) -> None:
    buf = rewrite(make_batch(), **{field: -1})
    with pytest.raises(CorruptRecordError, match="negative"):
        batch.check_batch(buf, 0, len(buf))


def test_fields_outside_the_crc_do_not_break_it() -> None:
    buf = rewrite(make_batch(), base_offset=99, leader_epoch=12, fix_crc=False)
    assert batch.check_batch(buf, 0, len(buf)).leader_epoch == 12


# -- validate_produced ----------------------------------------------------------


def test_validate_produced_accepts_batches_back_to_back() -> None:
    buf = make_batch(2) + make_batch(5, base_offset=0, codec=1)
    headers = batch.validate_produced(buf, max_batch_bytes=10_000)
    assert [h.records_count for h in headers] == [2, 5]
    assert [h.codec for h in headers] == [0, 1]


def test_validate_produced_rejects_an_empty_request() -> None:
    with pytest.raises(InvalidRecordError, match="no record batch"):
        batch.validate_produced(b"", max_batch_bytes=10_000)


def test_validate_produced_runs_check_batch() -> None:
    buf = bytearray(make_batch())
    buf[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        batch.validate_produced(buf, max_batch_bytes=10_000)


@pytest.mark.parametrize("delta", [0, 1, 3, 100])
def test_validate_produced_rejects_a_last_offset_delta_mismatch(delta: int) -> None:
    buf = rewrite(make_batch(3), last_offset_delta=delta)
    with pytest.raises(InvalidRecordError, match="does not match"):
        batch.validate_produced(buf, max_batch_bytes=10_000)


def test_validate_produced_rejects_zero_records() -> None:
    buf = empty_batch()
    assert batch.check_batch(buf, 0, len(buf)).records_count == 0
    with pytest.raises(InvalidRecordError, match="at least one record"):
        batch.validate_produced(buf, max_batch_bytes=10_000)


def test_validate_produced_rejects_control_batches() -> None:
    good = make_batch()
    buf = rewrite(good, attributes=batch.parse_header(good).attributes | batch.CONTROL_BIT)
    assert batch.parse_header(buf).is_control
    with pytest.raises(InvalidRecordError, match="control"):
        batch.validate_produced(buf, max_batch_bytes=10_000)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_validate_produced_rejects_unknown_codecs(codec: int) -> None:
    good = make_batch()
    buf = rewrite(good, attributes=batch.parse_header(good).attributes | codec)
    with pytest.raises(UnsupportedCompressionError, match=f"codec {codec}"):
        batch.validate_produced(buf, max_batch_bytes=10_000)


def test_validate_produced_rejects_the_cleaners_delete_horizon_flag() -> None:
    good = make_batch()
    flagged = batch.parse_header(good).attributes | batch.DELETE_HORIZON_BIT
    with pytest.raises(InvalidRecordError, match="delete-horizon"):
        batch.validate_produced(rewrite(good, attributes=flagged), max_batch_bytes=10_000)


def test_validate_produced_enforces_the_size_limit_per_batch() -> None:
    one = make_batch(3)
    batch.validate_produced(one + one, max_batch_bytes=len(one))
    with pytest.raises(RecordTooLargeError, match=f"batch of {len(one)} bytes"):
        batch.validate_produced(one, max_batch_bytes=len(one) - 1)


@pytest.mark.parametrize(
    ("base", "top"), [(-2, 5), (5, -2), (10, 9), (-5, -5)], ids=["base", "max", "order", "both"]
)
def test_validate_produced_rejects_bad_timestamps(base: int, top: int) -> None:
    buf = rewrite(make_batch(), base_timestamp=base, max_timestamp=top)
    with pytest.raises(InvalidTimestampError):
        batch.validate_produced(buf, max_batch_bytes=10_000)


def test_validate_produced_accepts_missing_timestamps() -> None:
    buf = rewrite(make_batch(), base_timestamp=-1, max_timestamp=-1)
    batch.validate_produced(buf, max_batch_bytes=10_000, now_ms=10**12, max_timestamp_skew_ms=1)


def test_validate_produced_checks_skew_only_when_asked() -> None:
    buf = make_batch(3, ts=1_000)  # timestamps 1000..1002
    batch.validate_produced(buf, max_batch_bytes=10_000)
    batch.validate_produced(buf, max_batch_bytes=10_000, now_ms=1_001, max_timestamp_skew_ms=1)
    batch.validate_produced(buf, max_batch_bytes=10_000, now_ms=10**12)
    for now in (998, 1_004):
        with pytest.raises(InvalidTimestampError, match="from now"):
            batch.validate_produced(
                buf, max_batch_bytes=10_000, now_ms=now, max_timestamp_skew_ms=1
            )


# -- rewriting in place -----------------------------------------------------------


def test_set_offset_and_epoch_keeps_the_crc_valid() -> None:
    original = make_batch(3)
    buf = bytearray(b"\x00" * 7 + original)
    batch.set_offset_and_epoch(buf, 7, 1_000_000, 42)
    header = batch.check_batch(buf, 7, len(buf))
    assert (header.base_offset, header.leader_epoch) == (1_000_000, 42)
    assert header.batch_length == len(original) - 12
    assert header.crc == batch.parse_header(original).crc
    assert buf[7 + 16 :] == original[16:]
    assert [r.offset for r in decode_records(bytes(buf[7:]))] == [1_000_000, 1_000_001, 1_000_002]


def test_set_base_offset_only_touches_the_first_eight_bytes() -> None:
    original = make_batch(2)
    buf = bytearray(original)
    batch.set_base_offset(buf, 0, 77)
    assert batch.check_batch(buf, 0, len(buf)).base_offset == 77
    assert buf[8:] == original[8:]


# -- iter_batches and scan ----------------------------------------------------------


def three_batches() -> tuple[bytes, list[bytes]]:
    parts = [
        make_batch(2, base_offset=0, ts=100),
        make_batch(3, base_offset=2, ts=50),
        make_batch(1, base_offset=5, ts=70),
    ]
    return b"".join(parts), parts


def test_iter_batches_yields_each_header() -> None:
    buf, parts = three_batches()
    headers = list(batch.iter_batches(buf))
    assert [h.base_offset for h in headers] == [0, 2, 5]
    assert [h.size for h in headers] == [len(p) for p in parts]
    assert list(batch.iter_batches(buf, len(parts[0]), len(parts[0]) + len(parts[1]))) == [
        headers[1]
    ]
    assert list(batch.iter_batches(b"")) == []


def test_iter_batches_raises_at_the_first_bad_batch_after_the_good_ones() -> None:
    buf, parts = three_batches()
    damaged = bytearray(buf)
    damaged[len(parts[0]) + 40] ^= 0xFF
    batches = batch.iter_batches(damaged)
    assert next(batches).base_offset == 0
    with pytest.raises(CorruptRecordError, match="CRC"):
        next(batches)


def test_scan_walks_valid_batches() -> None:
    buf, _ = three_batches()
    result = batch.scan(buf)
    assert result == batch.ScanResult(len(buf), 3, 6, 101, None)
    assert batch.scan(b"") == batch.ScanResult(0, 0, None, -1, None)
    assert batch.scan(b"", expected_offset=9) == batch.ScanResult(0, 0, 9, -1, None)


@pytest.mark.parametrize("damage", ["crc", "truncated", "garbage"])
def test_scan_stops_at_the_first_bad_batch(damage: str) -> None:
    buf, parts = three_batches()
    good = len(parts[0]) + len(parts[1])
    tail = bytearray(parts[2])
    if damage == "crc":
        tail[-1] ^= 1
    elif damage == "truncated":
        tail = tail[:-3]
    else:
        tail = bytearray(b"\x01" * 70)
    result = batch.scan(buf[:good] + tail + parts[0])
    assert (result.valid_bytes, result.batches, result.next_offset) == (good, 2, 5)
    assert result.max_timestamp == 101
    assert result.error


def test_scan_treats_zero_padding_as_the_end() -> None:
    buf, _ = three_batches()
    result = batch.scan(buf + bytes(4096))
    assert result == batch.ScanResult(len(buf), 3, 6, 101, None)
    assert batch.scan(bytes(100)) == batch.ScanResult(0, 0, None, -1, None)


def test_scan_rejects_offsets_that_go_back() -> None:
    first = make_batch(3, base_offset=10)
    result = batch.scan(first + make_batch(1, base_offset=12))
    assert (result.valid_bytes, result.batches, result.next_offset) == (len(first), 1, 13)
    assert result.error is not None
    assert "goes back" in result.error
    early = batch.scan(first, expected_offset=11)
    assert (early.valid_bytes, early.batches) == (0, 0)
    assert early.error is not None


def test_scan_between_positions() -> None:
    buf, parts = three_batches()
    start = len(parts[0])
    result = batch.scan(buf, start, start + len(parts[1]), expected_offset=2)
    assert result == batch.ScanResult(len(parts[1]), 1, 5, 52, None)

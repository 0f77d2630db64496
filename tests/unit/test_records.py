"""Tests of the record level (mq.records.records) and its codecs (mq.records.compression).

Round trips through build_batch and decode_records, varint edge cases, the
builder's accumulator behaviour, and the fuzz invariant: any bytes either
decode or raise CorruptRecordError.
"""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mq.errors import CorruptRecordError, UnsupportedCompressionError
from mq.records import batch, compression
from mq.records.records import (
    BatchBuilder,
    Record,
    build_batch,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
CODECS = list(compression.CODEC_NAMES)
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

headers_st = st.lists(
    st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3
)
record_st = st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    headers_st,
    st.integers(-1, 2**45),
)


def fix_crc(buf: bytes | bytearray) -> bytes:
    out = bytearray(buf)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def with_records_section(template: bytes, section: bytes, *, count: int | None = None) -> bytes:
    """``template``'s header (length, count and CRC adjusted) over a hand-made records section."""
    out = bytearray(template[:61] + section)
    struct.pack_into(">i", out, 8, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, 23, max(count - 1, 0))
        struct.pack_into(">i", out, 57, count)
    return fix_crc(out)


def plain(records: list[Record]) -> list[tuple[bytes | None, bytes | None, tuple, int]]:
    return [(r.key, r.value, r.headers, r.timestamp) for r in records]


# -- varints --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (-65, "8101"),
        (INT32[1], "feffffff0f"),
        (INT32[0], "ffffffff0f"),
    ],
)
def test_varint_known_encodings(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)
    assert encode_varlong(value).hex() == encoded


def test_varlong_extremes() -> None:
    assert encode_varlong(INT64[1]).hex() == "feffffffffffffffff01"
    assert encode_varlong(INT64[0]).hex() == "ffffffffffffffffff01"
    for value in INT64:
        assert decode_varlong(b"\xaa" + encode_varlong(value), 1) == (value, 11)


@pytest.mark.parametrize("value", [INT32[0] - 1, INT32[1] + 1, 2**40])
def test_encode_varint_refuses_values_outside_int32(value: int) -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_varint(value)
    assert decode_varlong(encode_varlong(value))[0] == value


@pytest.mark.parametrize("value", [INT64[0] - 1, INT64[1] + 1])
def test_encode_varlong_refuses_values_outside_int64(value: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("", "truncated"),
        ("80", "truncated"),
        ("ffff", "truncated"),
        ("ffffffff", "truncated"),
        ("ffffffffff01", "longer than 5"),
        ("ffffffff1f", "out of range"),
        ("8080808080", "longer than 5"),
    ],
)
def test_decode_varint_rejects_malformed_input(data: str, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode_varint(bytes.fromhex(data))


def test_decode_varlong_rejects_eleven_bytes_and_overflow() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\xff" * 10 + b"\x01")
    with pytest.raises(CorruptRecordError, match="out of range"):
        decode_varlong(b"\xff" * 9 + b"\x03")
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varlong(b"\xff" * 9)


@given(st.integers(*INT32), st.integers(*INT64))
def test_varints_round_trip(small: int, large: int) -> None:
    buf = encode_varint(small) + encode_varlong(large)
    value, pos = decode_varint(buf)
    assert value == small
    assert decode_varlong(buf, pos) == (large, len(buf))


# -- round trips ----------------------------------------------------------------


@FUZZ
@given(
    records=st.lists(record_st, min_size=1, max_size=12),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
    producer=st.tuples(st.integers(-1, 2**40), st.integers(-1, 2**15 - 1), st.integers(-1, 2**30)),
    transactional=st.booleans(),
)
def test_build_then_decode_round_trips(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    codec: int,
    base_offset: int,
    producer: tuple[int, int, int],
    transactional: bool,
) -> None:
    producer_id, producer_epoch, base_sequence = producer
    buf = build_batch(
        records,
        codec=codec,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
    )
    decoded = decode_records(buf)
    assert plain(decoded) == [(k, v, tuple(h), t) for k, v, h, t in records]
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))
    header = batch.check_batch(buf, 0, len(buf))
    assert header.size == len(buf)
    assert (header.codec, header.is_transactional) == (codec, transactional)
    assert header.records_count == header.last_offset_delta + 1 == len(records)
    assert header.base_timestamp == records[0][3]
    assert header.max_timestamp == max(r[3] for r in records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.leader_epoch == -1
    batch.validate_produced(buf, max_batch_bytes=len(buf))


@pytest.mark.parametrize("size", [0, 1, 55, 56, 57, 62, 63, 64, 8185, 8186, 8187, 70_000])
def test_record_lengths_across_varint_boundaries(size: int) -> None:
    # The record body is 7 bytes plus the value here, so sizes near 63 and
    # 8191 put the length prefix on either side of a one/two/three-byte varint.
    records = [(None, b"x" * size, [], 5), (b"k", b"y" * size, [("h", b"z" * size)], 4)]
    buf = build_batch(records)
    assert plain(decode_records(buf)) == [(k, v, tuple(h), t) for k, v, h, t in records]


def test_timestamps_can_go_backwards_within_a_batch() -> None:
    buf = build_batch([(None, b"a", [], 500), (None, b"b", [], 100), (None, b"c", [], 700)])
    header = batch.parse_header(buf)
    assert (header.base_timestamp, header.max_timestamp) == (500, 700)
    assert [r.timestamp for r in decode_records(buf)] == [500, 100, 700]


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    buf = build_batch([(None, b"a", [], 5), (None, b"b", [], 9)], timestamp_type=1)
    assert batch.parse_header(buf).attributes & batch.TIMESTAMP_TYPE_BIT
    assert [r.timestamp for r in decode_records(buf)] == [9, 9]


def test_decode_accepts_bytearray_and_memoryview() -> None:
    buf = build_batch([(b"k", b"v", [("a", None)], 1)])
    expected = decode_records(buf)
    assert decode_records(bytearray(buf)) == expected
    assert decode_records(memoryview(b"xx" + buf)[2:]) == expected
    assert expected == [Record(0, 1, b"k", b"v", (("a", None),))]


def test_a_batch_with_zero_records_decodes_to_nothing() -> None:
    template = build_batch([(None, None, [], 0)])
    assert decode_records(with_records_section(template, b"", count=0)) == []


# -- the builder as an accumulator ----------------------------------------------


def test_builder_size_is_exact_for_codec_none() -> None:
    builder = BatchBuilder()
    assert builder.size_in_bytes() == 61
    for i in range(5):
        assert builder.append(b"key", b"v" * i * 30, [("h", b"1")], i)
    assert len(builder) == 5
    size = builder.size_in_bytes()
    built = builder.build()
    assert len(built) == size == builder.size_in_bytes()
    assert builder.build() is built


def test_builder_stops_at_the_size_limit_but_always_takes_the_first_record() -> None:
    builder = BatchBuilder(codec=compression.CODEC_GZIP)
    assert builder.append(None, b"x" * 500, [], 1, max_batch_bytes=100)
    assert builder.append(None, b"y" * 10, [], 2, max_batch_bytes=600)
    before = builder.size_in_bytes()
    assert not builder.append(None, b"z" * 50, [], 3, max_batch_bytes=before + 20)
    assert builder.size_in_bytes() == before
    assert builder.append(None, b"z", [], 3, max_batch_bytes=before + 20)
    assert [r.value for r in decode_records(builder.build())] == [b"x" * 500, b"y" * 10, b"z"]


def test_a_failed_append_leaves_no_partial_record() -> None:
    builder = BatchBuilder()
    builder.append(b"a", b"1", [], 10)
    size = builder.size_in_bytes()
    with pytest.raises((TypeError, AttributeError)):
        builder.append(b"b", b"2", [("h", "not bytes")], 11)  # type: ignore[list-item]
    assert (builder.size_in_bytes(), len(builder)) == (size, 1)
    builder.append(b"c", b"3", [], 12)
    assert builder.build() == build_batch([(b"a", b"1", [], 10), (b"c", b"3", [], 12)])


def test_builder_refusals() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        BatchBuilder().build()
    with pytest.raises(UnsupportedCompressionError):
        BatchBuilder(codec=5)
    with pytest.raises(ValueError, match="timestamp_type"):
        BatchBuilder(timestamp_type=2)
    with pytest.raises(ValueError, match="int64"):
        BatchBuilder().append(None, None, [], 2**63)
    builder = BatchBuilder()
    builder.append(None, None, [], -(2**62))
    with pytest.raises(ValueError, match="too far"):
        builder.append(None, None, [], 2**62)
    builder.build()
    with pytest.raises(RuntimeError, match="already built"):
        builder.append(None, None, [], 0)


# -- malformed input ------------------------------------------------------------

GOOD = build_batch([(b"key", b"value", [("h", b"v")], 1_000), (None, b"second", [], 1_001)])
# Records section of GOOD, as hand-assembled fragments.
REC0 = bytes.fromhex("24 00 00 00 06") + b"key" + b"\x0a" + b"value" + b"\x02\x02h\x02v"
REC1 = bytes.fromhex("18 00 02 02 01 0c") + b"second" + b"\x00"


def test_hand_assembled_records_match_the_builder() -> None:
    assert GOOD[61:] == REC0 + REC1
    assert decode_records(with_records_section(GOOD, REC0 + REC1)) == decode_records(GOOD)


MALFORMED = {
    "one-record-short": (REC0, None, "cannot hold|past the end"),
    "trailing-byte": (REC0 + REC1 + b"\x00", None, "follow the last record"),
    "offset-past-last-delta": (REC0 + REC1[:3] + b"\x04" + REC1[4:], None, "delta 2 after 0"),
    "count-too-high": (REC0 + REC1, 3, "cannot hold|past the end"),
    "count-matches": (REC0, 1, None),
    "length-too-long": (b"\x26" + REC0[1:] + b"\x00" + REC1, None, "fields end -1 bytes off"),
    "length-too-short": (b"\x22" + REC0[1:] + REC1, None, "fields end \\+1 bytes off"),
    "length-huge": (b"\xff\xff\xff\xff\x0f" + REC0[1:] + REC1, None, "impossible"),
    "negative-key-length": (REC0[:4] + b"\x05" + REC0[5:] + REC1, None, "negative length"),
    "header-key-not-utf8": (b"\x26" + REC0[1:-4] + b"\x04\xff\xfe\x02v" + REC1, None, "UTF-8"),
    "header-count-huge": (REC0[:-5] + b"\x7e" + REC0[-4:] + REC1, None, "claims 63 headers"),
    "header-count-negative": (REC0[:-5] + b"\x01" + REC0[-4:] + REC1, None, "claims -1 headers"),
    "offset-not-increasing": (REC0 + REC1[:3] + b"\x00" + REC1[4:], None, "delta 0 after 0"),
    "overlong-varint": (REC0[:1] + b"\0\0" + b"\xff" * 5 + REC0[8:] + REC1, None, "longer than 5"),
}


@pytest.mark.parametrize(("section", "count", "message"), MALFORMED.values(), ids=MALFORMED)
def test_malformed_records_raise_corrupt_record(
    section: bytes, count: int | None, message: str | None
) -> None:
    buf = with_records_section(GOOD, section, count=count)
    if message is None:
        assert decode_records(buf) == decode_records(GOOD)[:1]
        return
    with pytest.raises(CorruptRecordError, match=message):
        decode_records(buf)


def test_batch_level_damage_raises_corrupt_record() -> None:
    with pytest.raises(CorruptRecordError, match="follow the batch"):
        decode_records(GOOD + b"\x00")
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_records(GOOD[:-1] + b"\x01")
    attributes = bytearray(GOOD)
    attributes[22] |= 0x07
    with pytest.raises(CorruptRecordError, match="codec 7"):
        decode_records(fix_crc(attributes))


@pytest.mark.parametrize("codec", CODECS[1:])
def test_garbage_payload_with_a_valid_crc_raises_corrupt_record(codec: int) -> None:
    template = build_batch([(None, b"v", [], 0)], codec=codec)
    for payload in (b"", b"\x00" * 20, os.urandom(64), template[61:-3]):
        with pytest.raises(CorruptRecordError):
            decode_records(with_records_section(template, payload))


@pytest.mark.parametrize("codec", CODECS[1:])
def test_decompression_bomb_is_refused(codec: int) -> None:
    buf = build_batch([(None, bytes(1 << 20), [], 0)], codec=codec)
    assert len(buf) < 1 << 16
    assert decode_records(buf, max_decompressed=(1 << 20) + 20)[0].value == bytes(1 << 20)
    with pytest.raises(CorruptRecordError, match="more than"):
        decode_records(buf, max_decompressed=1 << 19)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_decode_or_raise_corrupt_record(data: bytes) -> None:
    for buf in (data, GOOD[:61] + data, with_records_section(GOOD, data)):
        try:
            decode_records(buf)
        except CorruptRecordError:
            pass


@FUZZ
@given(
    records=st.lists(record_st, min_size=1, max_size=4),
    codec=st.sampled_from(CODECS),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10**6),
    recrc=st.booleans(),
)
def test_mutated_batches_decode_or_raise_corrupt_record(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    codec: int,
    edits: list[tuple[int, int]],
    cut: int,
    recrc: bool,
) -> None:
    original = build_batch(records, codec=codec)
    mutated = bytearray(original)
    for where, byte in edits:
        mutated[where % len(mutated)] = byte
    if cut % 5 == 0:
        del mutated[cut % len(mutated) :]
    if recrc and len(mutated) > 21:
        mutated = bytearray(fix_crc(mutated))
    try:
        decoded = decode_records(bytes(mutated))
    except CorruptRecordError:
        return
    assert len(decoded) == batch.parse_header(mutated).records_count


# -- compression ----------------------------------------------------------------


def test_codec_names() -> None:
    assert compression.CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    for codec, name in compression.CODEC_NAMES.items():
        assert compression.codec_by_name(name) == codec
        assert compression.codec_name(codec) == name
    with pytest.raises(UnsupportedCompressionError):
        compression.codec_by_name("brotli")
    with pytest.raises(UnsupportedCompressionError):
        compression.codec_name(5)


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codecs_are_unsupported(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionError):
        compression.compress(codec, b"data")
    with pytest.raises(UnsupportedCompressionError):
        compression.decompress(codec, b"data", 100)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=2000) | st.just(os.urandom(70_000)))
def test_codecs_round_trip_within_the_bound(codec: int, data: bytes) -> None:
    packed = compression.compress(codec, memoryview(data))
    assert compression.decompress(codec, packed, len(data)) == data
    if data:
        with pytest.raises(CorruptRecordError, match="more than"):
            compression.decompress(codec, packed, len(data) - 1)


def test_lz4_frames_have_independent_blocks_and_no_content_checksum() -> None:
    frame = compression.compress(compression.CODEC_LZ4, b"abc" * 100_000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flags = frame[4]
    assert flags >> 6 == 1  # version
    assert flags & 0x20  # block independence: Kafka's reader refuses linked blocks
    assert not flags & 0x04  # content checksum


def test_snappy_writes_xerial_blocks_and_reads_raw_snappy() -> None:
    data = os.urandom(40_000) + bytes(40_000)
    framed = compression.compress(compression.CODEC_SNAPPY, data)
    assert framed[:16] == b"\x82SNAPPY\x00" + bytes.fromhex("0000000100000001")
    (first_block,) = struct.unpack_from(">i", framed, 16)
    assert cramjam.snappy.decompress_raw_len(framed[20 : 20 + first_block]) == 32 * 1024
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert compression.decompress(compression.CODEC_SNAPPY, raw, len(data)) == data
    with pytest.raises(CorruptRecordError, match="more than"):
        compression.decompress(compression.CODEC_SNAPPY, raw, len(data) - 1)
    for bad in (framed[:18], framed[:16] + b"\x7f\xff\xff\xff", framed[:-1]):
        with pytest.raises(CorruptRecordError):
            compression.decompress(compression.CODEC_SNAPPY, bad, len(data))


def test_gzip_reads_concatenated_members_and_refuses_truncation() -> None:
    two = gzip.compress(b"first ") + gzip.compress(b"second")
    assert compression.decompress(compression.CODEC_GZIP, two, 100) == b"first second"
    with pytest.raises(CorruptRecordError, match="more than"):
        compression.decompress(compression.CODEC_GZIP, two, 11)
    with pytest.raises(CorruptRecordError, match="truncated"):
        compression.decompress(compression.CODEC_GZIP, two[:-4], 100)


def test_zstd_reads_concatenated_frames() -> None:
    two = bytes(cramjam.zstd.compress(b"first ")) + bytes(cramjam.zstd.compress(b"second"))
    assert compression.decompress(compression.CODEC_ZSTD, two, 100) == b"first second"


@pytest.mark.parametrize("codec", [compression.CODEC_LZ4, compression.CODEC_ZSTD])
def test_output_buffer_grows_past_the_first_guess(codec: int) -> None:
    # 4 MiB of zeros compresses to far less than 1/8 of its size, so the first
    # buffer is too small: this pins cramjam's "buffer full" error message.
    data = bytes(4 << 20)
    packed = compression.compress(codec, data)
    assert len(packed) * 8 < len(data) // 4
    assert compression.decompress(codec, packed, len(data)) == data

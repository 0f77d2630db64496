"""The broker's check of produced records: C (mq/records/_speedups.c) against Python.

``validate_records`` must give the same verdict and the same message in both
versions for any bytes (valid batches, the hand-made malformed sections of
``test_records``, random damage), agree with the consumer's decoder on what a
producer may send (whatever it passes decodes), and leak nothing on its error
paths. ``validate_produced_records`` adds the batch level: each batch named,
compressed batches decompressed within a bound.
"""

from __future__ import annotations

import gc
import shutil
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_records import GOOD, MALFORMED, REC0, REC1, fix_crc, with_records_section

from mq.errors import CorruptRecordError, InvalidConfigError, InvalidRecordError
from mq.records import batch as fmt
from mq.records import record_loops, records
from mq.records.compression import CODEC_NONE, CODEC_ZSTD, CODECS_BY_NAME, compress
from mq.records.records import build_batch, decode_records, validate_produced_records
from mq.storage.config import MAX_DECOMPRESSION_FACTOR, LogConfig
from mq.storage.log import Log

pytestmark = pytest.mark.skipif(
    records._speedups is None and shutil.which("cc") is None,
    reason="no C compiler on this machine: mq runs the pure-Python check",
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3
)
record_st = st.tuples(
    st.none() | st.binary(max_size=30),
    st.none() | st.binary(max_size=200),
    headers_st,
    st.integers(0, 2**45),
)


def verdict(check: Any, data: bytes, count: int) -> str | None:
    """None when ``check`` accepts the records of batch ``data``, else its message."""
    try:
        check(data, fmt.RECORDS_AT, len(data), count, InvalidRecordError)
    except InvalidRecordError as exc:
        return str(exc)
    return None


def same(data: bytes, count: int | None = None) -> str | None:
    """The verdict of both versions, which must agree; and the decoder's, which must
    accept whatever they accept (with the header's count)."""
    n = fmt.parse_header(data).records_count if count is None else count
    c = verdict(records._speedups.validate_records, data, n)
    python = verdict(record_loops.validate_records, data, n)
    assert c == python
    if c is None and count is None:
        assert len(decode_records(data)) == n
    return c


def test_the_c_version_is_built_and_used() -> None:
    assert records._speedups is not None
    if records.USE_C:
        assert records.validate_records is records._speedups.validate_records


@pytest.mark.parametrize(("section", "count", "message"), MALFORMED.values(), ids=MALFORMED)
def test_what_the_decoder_refuses_the_check_refuses(
    section: bytes, count: int | None, message: str | None
) -> None:
    data = with_records_section(GOOD, section, count=count)
    if message is None:  # the one well-formed case
        assert same(data) is None
    else:
        assert same(data) is not None


REC1_ALONE = REC1[:3] + b"\x00" + REC1[4:]  # REC1 as a batch's first record (offset delta 0)

POISON = {
    "count-claims-1000": (REC0, 1000, "19 bytes cannot hold 1000 records"),
    "one-record-missing": (REC0, 2, "record 1: length varint is truncated"),
    "negative-key-length": (REC0[:4] + b"\x05" + REC0[5:] + REC1, None, "key length -3 is neg"),
    "negative-value-length": (REC1_ALONE[:5] + b"\x05" + REC1_ALONE[6:], 1, "value length -3 i"),
    "value-past-record": (REC1_ALONE[:5] + b"\x10" + REC1_ALONE[6:], 1, "8 runs past the record"),
    "negative-header-key": (REC0[:-4] + b"\x01" + REC0[-3:] + REC1, None, "header 0 key length"),
    "negative-header-value": (REC0[:-2] + b"\x05v" + REC1, None, "header 0 value length -3"),
    "header-key-not-utf8": (b"\x26" + REC0[1:-4] + b"\x04\xff\xfe\x02v" + REC1, None, "UTF-8"),
    "header-surrogate": (b"\x28" + REC0[1:-4] + b"\x06\xed\xa0\x80\x02v" + REC1, None, "UTF-8"),
    "header-count-huge": (REC0[:-5] + b"\x7e" + REC0[-4:] + REC1, None, "header count 63"),
    "offset-delta-gap": (REC0 + REC1[:3] + b"\x04" + REC1[4:], None, "offset delta 2, expected 1"),
    "offset-delta-first": (REC1[:3] + b"\x02" + REC1[4:], 1, "record 0: offset delta 1, expec"),
    "trailing-bytes": (REC0 + REC1 + b"\x00\x00", None, "2 bytes follow the last record"),
    "length-short": (b"\x22" + REC0[1:] + REC1, None, "record 0: header 0 value length 1"),
    "length-long": (b"\x26" + REC0[1:] + b"\x00" + REC1, None, "1 bytes follow its last field"),
    "length-tiny": (b"\x02" + REC0[1:] + REC1, None, "length 1 is below the minimum of 6"),
    "length-negative": (b"\xff\xff\xff\xff\x0f" + REC0[1:] + REC1, None, "length -2147483648"),
    "length-huge": (b"\xff\xff\xff\xff\x1f" + REC0[1:] + REC1, None, "varint is out of range"),
    "overlong-varint": (REC0[:1] + b"\0\0" + b"\xff" * 5 + REC0[8:] + REC1, None, "longer than"),
    "varlong-11-bytes": (REC0[:2] + b"\xff" * 11 + REC0[3:] + REC1, None, "timestamp delta"),
}


@pytest.mark.parametrize(("section", "count", "message"), POISON.values(), ids=POISON)
def test_poison_shapes_are_named(section: bytes, count: int | None, message: str) -> None:
    data = with_records_section(GOOD, section, count=count)
    result = same(data)
    assert result is not None
    assert message in result


def test_a_bad_record_count_in_the_header_alone() -> None:
    # recordsCount 1,000 and lastOffsetDelta 999 over two records
    data = bytearray(GOOD)
    struct.pack_into(">i", data, 23, 999)
    struct.pack_into(">i", data, 57, 1000)
    assert same(fix_crc(data)) == f"{len(GOOD) - 61} bytes cannot hold 1000 records"


@FUZZ
@given(st.lists(record_st, min_size=1, max_size=12))
def test_valid_batches_pass_alike(batch: list[tuple[Any, ...]]) -> None:
    assert same(build_batch(batch)) is None


@FUZZ
@given(
    st.lists(record_st, min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10_000),
    st.integers(-1, 2),
)
def test_damaged_batches_get_the_same_verdict(
    batch: list[tuple[Any, ...]], edits: list[tuple[int, int]], cut: int, extra: int
) -> None:
    data = bytearray(build_batch(batch))
    body = len(data) - fmt.RECORDS_AT
    for where, byte in edits:
        data[fmt.RECORDS_AT + where % body] = byte
    del data[len(data) - cut % body :]
    count = max(len(batch) + extra, 0)
    result = same(bytes(data), count)
    if result is None and count == fmt.parse_header(data).records_count:
        # whatever passes the check, the consumer's decoder reads
        assert len(decode_records(fix_crc(_with_length(data)))) == count


def _with_length(data: bytearray) -> bytearray:
    struct.pack_into(">i", data, 8, len(data) - 12)
    return data


@FUZZ
@given(st.binary(max_size=200), st.integers(0, 40))
def test_any_bytes_get_the_same_verdict(section: bytes, count: int) -> None:
    same(bytes(61) + section, count)


def test_error_paths_leak_nothing() -> None:
    cases = [
        (with_records_section(GOOD, s, count=c), c)
        for s, c, _ in [*MALFORMED.values(), *POISON.values()]
    ]
    cases.append((GOOD, None))
    check = records._speedups.validate_records

    def run() -> None:
        for data, count in cases:
            n = fmt.parse_header(data).records_count if count is None else count
            try:
                check(data, fmt.RECORDS_AT, len(data), n, InvalidRecordError)
            except InvalidRecordError:
                pass

    for _ in range(50):
        run()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2_000):
            run()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 50_000, f"{grown} bytes still held after the error paths"


def test_bad_bounds_are_a_value_error_in_both() -> None:
    for check in (records._speedups.validate_records, record_loops.validate_records):
        for pos, end, count in ((-1, 10, 0), (0, len(GOOD) + 1, 0), (20, 10, 0), (61, 61, -1)):
            with pytest.raises(ValueError, match="out of range"):
                check(GOOD, pos, end, count, InvalidRecordError)


# -- validate_produced_records ---------------------------------------------------


@pytest.mark.parametrize("codec", sorted(CODECS_BY_NAME.values()))
def test_produced_batches_of_every_codec_pass(codec: int) -> None:
    one = build_batch([(b"k", b"v" * 100, [("h", b"x")], 5)] * 3, codec=codec)
    two = build_batch([(None, b"w", [], 6)], codec=codec)
    data = one + two
    validate_produced_records(
        data, fmt.validate_produced(data, max_batch_bytes=10_000), max_decompressed=1 << 20
    )


def _zstd_batch(section: bytes, count: int) -> bytes:
    template = build_batch([(None, b"v", [], 0)], codec=CODEC_ZSTD)
    return with_records_section(template, compress(CODEC_ZSTD, section), count=count)


def test_the_second_batch_is_named_and_compressed_records_are_checked() -> None:
    bad = _zstd_batch(REC0 + REC1 + b"\x00", 2)
    data = GOOD + bad
    headers = fmt.validate_produced(data, max_batch_bytes=10_000)
    with pytest.raises(InvalidRecordError) as caught:
        validate_produced_records(data, headers, max_decompressed=1 << 20)
    assert str(caught.value) == (
        f"batch 1 (byte {len(GOOD)} of the request, zstd): 1 bytes follow the last record"
    )
    assert caught.value.code == 87
    assert not caught.value.retriable


def test_a_decompression_bomb_is_refused_within_the_bound() -> None:
    section = bytes(8 << 20)  # 8 MiB of zeros: a few hundred bytes of zstd
    bomb = _zstd_batch(section, 1)
    assert len(bomb) < 32 * 1024
    headers = fmt.validate_produced(bomb, max_batch_bytes=32 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRecordError, match="decompress to more than 1048576 bytes"):
            validate_produced_records(bomb, headers, max_decompressed=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 << 20, f"{peak} bytes allocated to refuse the bomb"


def test_garbage_compressed_payload_is_invalid_record() -> None:
    template = build_batch([(None, b"v", [], 0)], codec=CODEC_ZSTD)
    data = with_records_section(template, b"\x00" * 20, count=1)
    with pytest.raises(InvalidRecordError, match=r"batch 0 .*zstd.*invalid zstd data"):
        validate_produced_records(
            data, fmt.validate_produced(data, max_batch_bytes=10_000), max_decompressed=100
        )
    assert not issubclass(InvalidRecordError, CorruptRecordError)


def test_an_uncompressed_batch_is_not_copied() -> None:
    big = build_batch([(None, bytes(100), [], 0)] * 5_000, codec=CODEC_NONE)
    headers = fmt.validate_produced(big, max_batch_bytes=len(big))
    tracemalloc.start()
    try:
        validate_produced_records(memoryview(big), headers, max_decompressed=len(big))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10_000, f"{peak} bytes allocated to check {len(big)} bytes"


# -- the bound, per topic ---------------------------------------------------------


def test_the_decompression_bound_is_a_topic_setting() -> None:
    config = LogConfig().with_overrides({"max.decompression.factor": "4"})
    assert config.max_decompressed_bytes == 4 * config.max_message_bytes
    assert LogConfig().max_decompressed_bytes == MAX_DECOMPRESSION_FACTOR * (1024 * 1024 + 12)
    with pytest.raises(
        InvalidConfigError, match=r"max\.decompression\.factor must be an integer from 1 to"
    ):
        LogConfig().with_overrides({"max.decompression.factor": "0"})


def test_a_log_refuses_a_batch_past_its_bound_and_stores_nothing(tmp_path: Path) -> None:
    config = LogConfig(max_message_bytes=64 * 1024, max_decompression_factor=2)
    log = Log.open(tmp_path / "t-0", config)
    try:
        fits = build_batch([(None, bytes(100 * 1024), [], 0)], codec=CODEC_ZSTD)
        bomb = build_batch([(None, bytes(200 * 1024), [], 0)], codec=CODEC_ZSTD)
        assert log.append(fits).first_offset == 0
        with pytest.raises(InvalidRecordError, match="decompress to more than 131072 bytes"):
            log.append(bomb)
        poison = with_records_section(GOOD, REC0 + REC1 + b"\x00")
        with pytest.raises(InvalidRecordError, match="1 bytes follow the last record"):
            log.append(GOOD + poison)
        assert log.next_offset == 1
    finally:
        log.close()

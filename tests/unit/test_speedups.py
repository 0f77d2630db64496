"""The C record parser (mq/records/_speedups.c) against the Python one it replaces.

Both must give the same records, of the same type, and end at the same
position, or raise the same exception with the same message, for any bytes:
valid batches of every shape, then the same batches with bytes overwritten,
cut short or given a wrong record count. Error paths are also checked for
leaked objects, since C owns its references by hand.
"""

from __future__ import annotations

import gc
import os
import shutil
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_records import GOOD, MALFORMED, with_records_section

from mq.client.types import ConsumerRecord
from mq.errors import CorruptRecordError
from mq.records import batch as fmt
from mq.records import records
from mq.records.records import Record, build_batch

pytestmark = pytest.mark.skipif(
    records._speedups is None and shutil.which("cc") is None,
    reason="no C compiler on this machine: mq runs the pure-Python parser",
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Shape = tuple[type[tuple[Any, ...]], str, int] | None
SHAPE: Shape = (ConsumerRecord, "orders", 7)

headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3
)
record_st = st.tuples(
    st.none() | st.binary(max_size=30),
    st.none() | st.binary(max_size=200),
    headers_st,
    st.integers(0, 2**45),
)


def outcome(parse: Any, data: bytes, count: int, shape: Shape) -> tuple[Any, ...]:
    """What a parser makes of a batch: records and end position, or the error."""
    header = fmt.parse_header(data)
    try:
        parsed, pos = parse(data, fmt.RECORDS_AT, count, header, shape)
    except (CorruptRecordError, IndexError, UnicodeDecodeError) as exc:
        return ("error", type(exc), str(exc))
    return ("ok", [(type(r), tuple(r)) for r in parsed], pos)


def same(data: bytes, count: int, shape: Shape = None) -> tuple[Any, ...]:
    c = outcome(records._parse_records_c, data, count, shape)
    python = outcome(records._parse_records, data, count, shape)
    assert c == python
    return c


def test_the_accelerator_is_built_and_used() -> None:
    assert records._speedups is not None, "setup.py did not build mq.records._speedups"
    if os.environ.get("MQ_PURE_PYTHON"):
        assert records.parse_records is records._parse_records
    else:
        assert records.parse_records is records._parse_records_c


def test_records_come_out_whole_in_both_shapes() -> None:
    kind, parsed = same(GOOD, 2)[:2]
    assert kind == "ok"
    assert parsed[0] == (Record, (0, 1_000, b"key", b"value", (("h", b"v"),)))
    assert parsed[1] == (Record, (1, 1_001, None, b"second", ()))
    c_records, _ = records._parse_records_c(GOOD, fmt.RECORDS_AT, 2, fmt.parse_header(GOOD), SHAPE)
    assert c_records[0] == ConsumerRecord(
        "orders", 7, 0, 1_000, b"key", b"value", (("h", b"v"),), 0
    )
    assert not any(gc.is_tracked(r) for r in c_records)  # immutable all through
    assert c_records[1].value == b"second"
    assert c_records[1].timestamp_type == 0
    assert same(GOOD, 2, SHAPE)[0] == "ok"


@pytest.mark.parametrize(("section", "count", "message"), MALFORMED.values(), ids=MALFORMED)
def test_malformed_records_fail_alike(section: bytes, count: int | None, message: str) -> None:
    data = with_records_section(GOOD, section, count=count)
    same(data, fmt.parse_header(data).records_count)


def test_log_append_time_and_extreme_offsets() -> None:
    built = build_batch(
        [(None, b"a", [], 5), (b"k", None, [("x", None)], 9)],
        base_offset=2**63 - 2,
        timestamp_type=1,
    )
    parsed = same(built, 2, SHAPE)[1]
    assert [r[1][2:4] for r in parsed] == [(2**63 - 2, 9), (2**63 - 1, 9)]
    assert [r[1][7] for r in parsed] == [1, 1]
    # a base timestamp and delta that sum past int64 (only a damaged header says so):
    # Python ints, exact, in both
    data = bytearray(build_batch([(None, b"a", [], 5), (None, b"b", [], 9)]))
    fmt.write_header(data, fmt.parse_header(data)._replace(base_timestamp=2**63 - 1))
    parsed = same(bytes(data), 2)[1]
    assert [r[1][1] for r in parsed] == [2**63 - 1, 2**63 + 3]


@FUZZ
@given(
    st.lists(record_st, min_size=1, max_size=12),
    st.booleans(),
    st.integers(0, 2**40),
)
def test_valid_batches_parse_alike(
    batch: list[tuple[Any, ...]], append_time: bool, base_offset: int
) -> None:
    data = build_batch(batch, base_offset=base_offset, timestamp_type=int(append_time))
    kind, parsed, _ = same(data, len(batch), SHAPE if append_time else None)
    assert kind == "ok"
    value_at = 5 if append_time else 3
    assert [r[1][value_at] for r in parsed] == [value for _, value, _, _ in batch]


@FUZZ
@given(
    st.lists(record_st, min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10_000),
    st.integers(-1, 2),
)
def test_damaged_batches_fail_alike(
    batch: list[tuple[Any, ...]], edits: list[tuple[int, int]], cut: int, extra: int
) -> None:
    data = bytearray(build_batch(batch))
    body = len(data) - fmt.RECORDS_AT
    for where, byte in edits:
        data[fmt.RECORDS_AT + where % body] = byte
    del data[len(data) - cut % body :]  # cut % body == 0 keeps every byte
    same(bytes(data), max(len(batch) + extra, 0))


def test_error_paths_leak_nothing() -> None:
    cases = [with_records_section(GOOD, s, count=c) for s, c, _ in MALFORMED.values()]
    cases.append(GOOD)

    def run() -> None:
        for data in cases:
            header = fmt.parse_header(data)
            for shape in (None, SHAPE):
                try:
                    records._parse_records_c(
                        data, fmt.RECORDS_AT, header.records_count, header, shape
                    )
                except (CorruptRecordError, IndexError, UnicodeDecodeError):
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
    # 2,000 rounds of every case: a leaked object per case would be > 500 KB
    assert grown < 50_000, f"{grown} bytes still held after the error paths"


# -- the encoder ---------------------------------------------------------------


def encoded(append: Any, *args: Any) -> tuple[Any, ...]:
    """What an encoder makes of one record after a 10-byte prefix: the buffer and
    the result, or the error's type."""
    buf = bytearray(b"0123456789")
    try:
        result = append(buf, *args)
    except (TypeError, ValueError) as exc:
        return ("error", type(exc), bytes(buf))
    return ("ok", result, bytes(buf))


@FUZZ
@given(
    record_st,
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**31 - 1),
    st.integers(-1, 400),
)
def test_records_encode_alike(
    record: tuple[Any, ...], ts_delta: int, offset_delta: int, limit: int
) -> None:
    key, value, headers, _ = record
    args = (ts_delta, offset_delta, key, value, headers, limit)
    c = encoded(records._speedups.append_record, *args)
    assert c == encoded(records._append_record, *args)
    if c[1] is False:  # left out: it would have taken the buffer past the limit
        unlimited = encoded(records._speedups.append_record, *args[:-1], -1)
        assert c[2] == b"0123456789"
        assert len(unlimited[2]) > limit >= 0
    else:
        assert c[1] is True
        assert limit < 0 or len(c[2]) <= limit


@pytest.mark.parametrize(
    ("key", "value", "headers"),
    [
        ("text", b"v", []),
        (None, "text", []),
        (None, 5, []),
        (None, b"v", [(b"bytes-key", b"v")]),
        (None, b"v", [("k", "text")]),
        (None, b"v", [("k", b"v", b"extra")]),
        (None, b"v", [("k",)]),
        (None, b"v", None),
    ],
)
def test_bad_fields_raise_alike_and_leave_the_buffer(key: Any, value: Any, headers: Any) -> None:
    args = (0, 0, key, value, headers, -1)
    c = encoded(records._speedups.append_record, *args)
    assert c[0] == "error"
    assert c[2] == b"0123456789"
    assert c == encoded(records._append_record, *args)


def test_many_headers_and_large_values_encode_alike() -> None:
    headers = [(f"h{i}", os.urandom(i % 7) if i % 5 else None) for i in range(40)]
    big = os.urandom(20_000)
    for record in ((b"k" * 300, big, headers), (None, None, headers[:16]), (None, big, [])):
        args = (12345, 7, *record, -1)
        assert encoded(records._speedups.append_record, *args) == encoded(
            records._append_record, *args
        )


def bulk(append: Any, values: list[Any], *args: Any) -> tuple[Any, ...]:
    buf = bytearray(b"prefix")
    try:
        added = append(buf, values, *args)
    except TypeError:
        return ("error", bytes(buf))
    return (added, bytes(buf))


@FUZZ
@given(
    st.lists(st.none() | st.binary(max_size=300) | st.binary(max_size=20).map(bytearray)),
    st.integers(0, 5),
    st.integers(0, 2**31 - 1) | st.just(0),
    st.integers(-(2**63), 2**63 - 1) | st.just(0),
    st.integers(0, 3_000),
)
def test_bulk_values_encode_alike(
    values: list[Any], start: int, first_delta: int, ts_delta: int, limit: int
) -> None:
    args = (start, first_delta, ts_delta, limit)
    c = bulk(records._speedups.append_values, values, *args)
    assert c == bulk(records._append_values, values, *args)
    added, buf = c
    assert added == 0 or first_delta == 0 or len(buf) <= limit


def test_bulk_values_refuse_what_is_not_bytes() -> None:
    for bad in ("text", 5):
        c = bulk(records._speedups.append_values, [b"a", bad], 0, 0, 0, 10_000)
        assert c == ("error", b"prefix")
        assert c == bulk(records._append_values, [b"a", bad], 0, 0, 0, 10_000)
    views = [memoryview(b"abc"), b"d"]
    assert bulk(records._speedups.append_values, views, 0, 0, 0, 10_000) == bulk(
        records._append_values, views, 0, 0, 0, 10_000
    )

"""The columnar decoder gives exactly what the exact record parser gives, or its error."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mq.errors import CorruptRecordError
from mq.records.batch import (
    CONTROL_BIT,
    compute_crc,
    parse_header,
    set_base_offset,
    write_header,
)
from mq.records.compression import CODEC_NONE, CODEC_ZSTD
from mq.records.records import build_batch
from spark_connector import columnar
from spark_connector.columnar import _exact, to_arrow_columns

NAME, PARTITION = "t", 3

values = st.one_of(st.none(), st.binary(max_size=300))
records = st.tuples(
    values,  # key
    values,  # value
    st.integers(0, 1 << 40),  # timestamp
)


@st.composite
def chunks(draw: st.DrawFn) -> tuple[bytes, int, int, bool]:
    """Whole batches back to back, as a fetch returns them, a range to read, and
    whether some record has headers (which only the exact parser decodes)."""
    data = bytearray()
    offset = draw(st.integers(0, 1000))
    first = offset
    with_headers = draw(st.booleans())
    for _ in range(draw(st.integers(1, 6))):
        batch = draw(st.lists(records, min_size=1, max_size=40))
        rows = [
            (key, value, [("h", b"x")] if with_headers and i == 0 else [], stamp)
            for i, (key, value, stamp) in enumerate(batch)
        ]
        raw = bytearray(
            build_batch(
                rows,
                codec=draw(st.sampled_from([CODEC_NONE, CODEC_NONE, CODEC_ZSTD])),
                timestamp_type=draw(st.sampled_from([0, 0, 1])),
            )
        )
        if draw(st.integers(0, 9)) == 0:
            header = parse_header(raw)
            write_header(raw, header._replace(attributes=header.attributes | CONTROL_BIT))
        set_base_offset(raw, 0, offset)
        data += raw
        offset += len(batch) + draw(st.integers(0, 3))  # compaction leaves gaps
    start = draw(st.integers(first - 2, offset))
    end = draw(st.integers(start, offset + 2))
    return bytes(data), start, end, with_headers


def rows(batch: pa.RecordBatch | None) -> list[dict[str, object]]:
    return [] if batch is None else batch.to_pylist()


@pytest.mark.parametrize("walk", ["side by side", "python"])
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chunk=chunks())
def test_columns_equal_the_exact_parsers_rows(
    walk: str, chunk: tuple[bytes, int, int, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columnar, "_STEP_COST", 0.0 if walk == "side by side" else 1e9)
    exact_calls: list[int] = []

    def exact(*args: object) -> object:
        exact_calls.append(1)
        return _exact(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(columnar, "_exact", exact)
    data, start, end, with_headers = chunk
    got = to_arrow_columns(data, NAME, PARTITION, start, end)
    expected = _exact(data, NAME, PARTITION, start, end)
    assert rows(got) == rows(expected)
    if not with_headers:
        assert not exact_calls, "a chunk without headers left the fast path"
    if got is not None:
        assert got.schema == expected.schema  # type: ignore[union-attr]
        offsets = got.column("offset").to_pylist()
        assert offsets == sorted(offsets)
        assert all(start <= o < end for o in offsets)


def test_a_plain_chunk_takes_the_fast_path() -> None:
    batch = build_batch([(None, b"v%d" % i, [], 1000 + i) for i in range(50)])
    got = to_arrow_columns(batch, NAME, PARTITION, 10, 20)
    assert got is not None
    assert got.column("offset").to_pylist() == list(range(10, 20))
    assert got.column("value").to_pylist() == [b"v%d" % i for i in range(10, 20)]
    assert got.column("key").null_count == 10


@given(st.data())
@settings(max_examples=200, deadline=None)
def test_corruption_raises_the_exact_parsers_error(data: st.DataObject) -> None:
    raw = bytearray(build_batch([(b"k", b"value-%d" % i, [], i) for i in range(20)]))
    at = data.draw(st.integers(61, len(raw) - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError):  # the CRC, or what the fallback finds
        to_arrow_columns(bytes(raw), NAME, PARTITION, 0, 100)


@pytest.mark.parametrize("walk", ["side by side", "python"])
@given(data=st.data())
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_record_corrupt_under_a_good_crc_is_reported_as_the_parser_does(
    walk: str, data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columnar, "_STEP_COST", 0.0 if walk == "side by side" else 1e9)
    rows_in = [(b"k" if i % 2 else None, b"value-%d" % i, [], 5 * i) for i in range(20)]
    raw = bytearray(build_batch(rows_in))
    at = data.draw(st.integers(61, len(raw) - 1))
    raw[at] = data.draw(st.integers(0, 255))
    write_header(raw, parse_header(raw)._replace(crc=compute_crc(raw)))
    try:
        expected = rows(_exact(bytes(raw), NAME, PARTITION, 0, 100))
    except CorruptRecordError as exc:
        with pytest.raises(CorruptRecordError, match=re.escape(str(exc))):
            to_arrow_columns(bytes(raw), NAME, PARTITION, 0, 100)
        return
    assert rows(to_arrow_columns(bytes(raw), NAME, PARTITION, 0, 100)) == expected

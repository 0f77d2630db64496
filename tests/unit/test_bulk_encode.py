"""``BatchBuilder.append_values`` (``mq.records.bulk``) encodes exactly what ``append`` does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.records.bulk import TABLE_SIZE, encode_values, varint
from mq.records.records import BatchBuilder, decode_records, encode_varlong

value_st = st.none() | st.binary(max_size=40) | st.sampled_from([b"v" * 8_200, b"w" * 20_000])


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(value_st, max_size=5),
    values=st.lists(value_st, max_size=60),
    start=st.integers(0, 3),
    timestamp=st.integers(0, 2**41),
    later=st.integers(0, 2**20),
    limit=st.sampled_from([60, 300, 16_384, 10**6]),
)
def test_append_values_matches_record_by_record_appends(
    before: list[bytes | None],
    values: list[bytes | None],
    start: int,
    timestamp: int,
    later: int,
    limit: int,
) -> None:
    bulk, single = BatchBuilder(), BatchBuilder()
    for value in before:  # some records already in the batch, at an earlier timestamp
        assert bulk.append(None, value, (), timestamp) == single.append(None, value, (), timestamp)
    added = bulk.append_values(values, start, timestamp + later, max_batch_bytes=limit)
    expected = 0
    for value in values[start:]:
        if not single.append(None, value, (), timestamp + later, max_batch_bytes=limit):
            break
        expected += 1
    assert added == expected
    if before or added:
        assert bulk.build() == single.build()
        got = [r.value for r in decode_records(bulk.build())]
        assert got == before + values[start : start + added]


def test_the_first_record_of_a_batch_always_goes_in() -> None:
    builder = BatchBuilder()
    assert builder.append_values([b"x" * 500, b"y"], 0, 0, max_batch_bytes=100) == 1
    assert builder.append_values([b"z"], 0, 0, max_batch_bytes=100) == 0


def test_varints_past_the_table_and_a_built_batch() -> None:
    assert varint(TABLE_SIZE) == encode_varlong(TABLE_SIZE)
    assert varint(-(2**63)) == encode_varlong(-(2**63))
    data, count = encode_values([b"a"] * 3, 1, TABLE_SIZE + 5, 0, 10**6)
    assert count == 2
    assert data.count(b"a") == 2
    builder = BatchBuilder()
    builder.append_values([b"a"], 0, 0, max_batch_bytes=100)
    builder.build()
    with pytest.raises(RuntimeError, match="already built"):
        builder.append_values([b"b"], 0, 0, max_batch_bytes=100)
    with pytest.raises(ValueError, match="int64"):
        BatchBuilder().append_values([b"b"], 0, 2**63, max_batch_bytes=100)

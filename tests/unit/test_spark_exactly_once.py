"""The exactly-once sink's pure parts: derived identities, placement by content, and
the multiset difference a replay writes."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mq.client.partitioner import partition_for_key
from spark_connector.exactly_once import (
    EPOCHS_PER_ID,
    ID_SPACE,
    Replay,
    ReplayMismatchError,
    fingerprint,
    place,
    producer_identity,
    stream_task_identity,
)


def test_identities_are_stable_and_distinct() -> None:
    pid, epoch = producer_identity("query q1", 3, 41)
    assert (pid, epoch) == producer_identity("query q1", 3, 41)  # every attempt alike
    assert ID_SPACE <= pid < 2**63
    assert epoch == 41
    assert producer_identity("query q1", 3, 42) == (pid, 42)  # next micro-batch: next epoch
    assert producer_identity("query q1", 4, 41)[0] != pid
    assert producer_identity("query q2", 3, 41)[0] != pid
    # past the int16 epochs, a new id starts again at epoch 0
    later, first = producer_identity("query q1", 3, EPOCHS_PER_ID)
    assert later != pid
    assert first == 0
    assert producer_identity("query q1", 3, EPOCHS_PER_ID - 1) == (pid, EPOCHS_PER_ID - 1)


def test_stream_identity_needs_sparks_properties() -> None:
    identity = stream_task_identity(2, "abc", "17")
    assert identity is not None
    assert (identity.scope, identity.partition, identity.batch) == ("query abc", 2, 17)
    assert stream_task_identity(2, None, "17") is None
    assert stream_task_identity(2, "abc", None) is None
    assert stream_task_identity(2, "abc", "x") is None


Row = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int | None]
"""(key, value, headers, partition column)."""

PARTITIONS = 4

rows_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=3)),
        st.one_of(st.none(), st.binary(max_size=3)),
        st.lists(
            st.tuples(st.sampled_from(["a", "b"]), st.one_of(st.none(), st.binary(max_size=2))),
            max_size=2,
        ).map(tuple),
        st.one_of(st.none(), st.integers(0, PARTITIONS - 1)),
    ),
    max_size=60,
)


def placed(rows: list[Row]) -> list[int]:
    return [place(k, v, h, p, PARTITIONS) for k, v, h, p in rows]


def landed(rows: list[Row]) -> list[str]:
    """The records the rows make, as the topic holds them: (partition, key, value,
    headers). Two rows that differ only in a ``partition`` column that places them
    alike make the same record, so either may stand for the other."""
    records = zip(rows, placed(rows), strict=True)
    return sorted(repr((where, k, v, h)) for (k, v, h, _), where in records)


@given(rows=rows_strategy, data=st.data())
def test_placement_depends_on_the_row_not_on_its_position(
    rows: list[Row], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(len(rows))))
    before = dict(zip(range(len(rows)), placed(rows), strict=True))
    after = placed([rows[i] for i in order])
    assert after == [before[i] for i in order]
    for (key, _, _, partition), where in zip(rows, placed(rows), strict=True):
        assert 0 <= where < PARTITIONS
        if partition is not None:
            assert where == partition
        elif key is not None:
            assert where == partition_for_key(key, PARTITIONS)


def test_keyless_rows_spread_over_the_partitions_by_content() -> None:
    where = Counter(place(None, b"value %d" % i, [], None, PARTITIONS) for i in range(4_000))
    assert sorted(where) == list(range(PARTITIONS))
    assert min(where.values()) > 800  # about 1,000 each
    assert place(None, b"v", [("h", b"1")], None, 64) == place(None, b"v", [("h", b"1")], None, 64)


def test_fingerprints_tell_apart_what_the_sink_compares() -> None:
    rows = [
        (None, b"v", ()),
        (b"", b"v", ()),
        (None, None, ()),
        (None, b"", ()),
        (b"v", None, ()),
        (None, b"v", (("h", None),)),
        (None, b"v", (("h", b""),)),
        (None, b"v", (("a", b"1"), ("b", b"2"))),
        (None, b"v", (("b", b"2"), ("a", b"1"))),
        (b"k", b"v", (("a", b"1"),)),
        (b"kv", b"", (("a", b"1"),)),
    ]
    assert len({fingerprint(*row) for row in rows}) == len(rows)
    assert fingerprint(b"k", b"v", [("a", b"1")]) == fingerprint(b"k", b"v", (("a", b"1"),))


def replayed(rows: list[Row], written: list[Row]) -> tuple[list[Row], Replay]:
    """What a replay of ``rows`` sends after an earlier attempt wrote ``written``."""
    replay = Replay()
    earlier: dict[int, Counter[bytes]] = {}
    for (k, v, h, _), where in zip(written, placed(written), strict=True):
        earlier.setdefault(where, Counter())[fingerprint(k, v, h)] += 1
    for partition, digests in earlier.items():
        replay.add("t", partition, digests)
    sent = [
        row
        for row, where in zip(rows, placed(rows), strict=True)
        if not replay.written_before("t", where, row[0], row[1], row[2])
    ]
    return sent, replay


@given(rows=rows_strategy, data=st.data())
def test_a_replay_in_any_order_sends_the_multiset_difference(
    rows: list[Row], data: st.DataObject
) -> None:
    """Whatever part of its rows an earlier attempt wrote, in whatever order, a replay
    of the same rows in another order sends the rest: together, every row once."""
    first = data.draw(st.permutations(rows))
    written = first[: data.draw(st.integers(0, len(rows)))]
    again = data.draw(st.permutations(rows))
    sent, replay = replayed(again, written)
    replay.check(len(sent))
    assert landed(written + sent) == landed(rows)
    assert replay.skipped == len(written)


def test_the_difference_counts_duplicates() -> None:
    row: Row = (None, b"same", (), None)
    other: Row = (None, b"other", (), None)
    sent, replay = replayed([row, other, row, row], [row, row])
    assert sent == [other, row]
    replay.check(len(sent))


def test_a_replay_that_lacks_written_rows_is_an_error() -> None:
    written: list[Row] = [(None, b"a", (), None), (b"k", b"b", (), 1), (None, b"c", (), None)]
    rows: list[Row] = [(None, b"a", (), None), (b"k", b"B", (), 1), (None, b"d", (), None)]
    sent, replay = replayed(rows, written)
    assert sent == rows[1:]
    with pytest.raises(ReplayMismatchError, match="not deterministic") as info:
        replay.check(len(sent))
    assert "does not have 2 of the rows" in str(info.value)
    assert "t-1" in str(info.value)
    assert "2 rows" in str(info.value)  # what this attempt already wrote
    # one duplicate too many written before is a mismatch as well
    _, replay = replayed([(None, b"a", (), None)], [(None, b"a", (), None)] * 2)
    with pytest.raises(ReplayMismatchError):
        replay.check(0)

"""The exactly-once sink's pure parts: derived producer identities and row positions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mq.client.partitioner import partition_for_key
from spark_connector.exactly_once import (
    EPOCHS_PER_ID,
    ID_SPACE,
    Positions,
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


Row = tuple[bytes | None, int | None]


def placements(task: int, rows: list[Row], skip: dict[int, int]) -> list[tuple[int, bool]]:
    positions = Positions(task)
    positions.resumed("t", {p: skip.get(p, 0) for p in range(4)})
    return [positions.place("t", key, partition) for key, partition in rows]


rows_strategy = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=4)), st.one_of(st.none(), st.integers(0, 3))),
    max_size=60,
)


@given(rows=rows_strategy, task=st.integers(0, 7), data=st.data())
def test_a_replay_sends_exactly_the_rows_not_yet_written(
    rows: list[Row], task: int, data: st.DataObject
) -> None:
    """Whatever prefix of each partition's rows an earlier attempt wrote, the replay
    sends the rest: together, every row once, each in its partition."""
    first = placements(task, rows, {})
    assert all(send for _, send in first)
    per_partition: dict[int, int] = {}
    for partition, _ in first:
        per_partition[partition] = per_partition.get(partition, 0) + 1
    written = {p: data.draw(st.integers(0, n)) for p, n in per_partition.items()}
    replay = placements(task, rows, written)
    assert [p for p, _ in replay] == [p for p, _ in first]  # the same partitions
    seen: dict[int, int] = {}
    for partition, send in replay:
        position = seen.get(partition, 0)
        seen[partition] = position + 1
        assert send == (position >= written[partition])
    for (key, partition), (placed, _) in zip(rows, first, strict=True):
        if partition is not None:
            assert placed == partition
        elif key is not None:
            assert placed == partition_for_key(key, 4)

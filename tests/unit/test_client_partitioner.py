"""Partitioning: Kafka's murmur2 exactly, and sticky partitioning of keyless records."""

from __future__ import annotations

import random
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mq.client.partitioner import (
    DefaultPartitioner,
    StickyPartitions,
    murmur2,
    partition_for_key,
)

with warnings.catch_warnings():
    # kafka-python 3 loads its protocol schemas with importlib.resources' legacy
    # read_text, deprecated since Python 3.11: their warning, not ours.
    warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\)", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

# Apache Kafka's UtilsTest.testMurmur2, plus the empty array.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"": 275646681,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafkas_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


# kafka-python's test_murmur2_java_compatibility: partitions out of 1000.
@pytest.mark.parametrize(
    ("key", "partition"),
    [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)],
)
def test_partition_for_key_matches_the_java_client(key: bytes, partition: int) -> None:
    assert partition_for_key(key, 1000) == partition
    assert DefaultPartitioner()(key, list(range(1000)), [0]) == partition


@given(st.binary(max_size=100))
def test_murmur2_agrees_with_kafka_python(data: bytes) -> None:
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data) & 0xFFFFFFFF
    assert -(1 << 31) <= murmur2(data) < (1 << 31)


def test_keyless_records_go_to_an_available_partition() -> None:
    partitioner = DefaultPartitioner(random.Random(1))
    picks = {partitioner(None, [0, 1, 2, 3], [1, 3]) for _ in range(100)}
    assert picks == {1, 3}
    assert {partitioner(None, [0, 1], []) for _ in range(100)} == {0, 1}


class _Batch:
    def __init__(self) -> None:
        self.is_open = True


def test_sticky_partitions_switch_away_from_the_previous_partition() -> None:
    sticky: StickyPartitions[_Batch] = StickyPartitions(random.Random(7))
    assert sticky.partition("t") is None
    assert sticky.batches.get("t") is None
    first = sticky.switch("t", [0, 1, 2], [0, 1, 2])
    batch = _Batch()
    sticky.stick("t", first, batch)
    assert sticky.partition("t") == first
    assert sticky.batches["t"] is batch
    for _ in range(50):
        nxt = sticky.switch("t", [0, 1, 2], [0, 1, 2])
        assert nxt != first
    sticky.stick("t", 5, _Batch())
    assert sticky.switch("t", [5], [5]) == 5  # no other choice
    sticky.forget("t")
    assert sticky.partition("t") is None

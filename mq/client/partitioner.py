"""Choosing a partition for a record: Kafka's murmur2 for keys, sticky for keyless records.

A keyed record goes to ``toPositive(murmur2(key)) % partitions``, exactly
Kafka's default partitioner, so keys land on the same partitions as with
Kafka's clients (same topic, same partition count). A keyless record goes to a
*sticky* partition: the producer keeps appending keyless records of a topic
to one partition until that partition's batch is full or sent, then picks
another at random (KIP-480), which fills batches faster than round-robin.

Pure: no I/O. A custom partitioner is any callable
``(key, all_partitions, available_partitions) -> partition``, as in aiokafka.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Final, Generic, TypeVar

Partitioner = Callable[[bytes | None, Sequence[int], Sequence[int]], int]
"""``(key, all_partitions, available_partitions) -> partition id``."""

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 of ``data`` as a signed int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length // 4
    m = _M
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * m) & _MASK
        k ^= k >> 24
        k = (k * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` among ``partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class DefaultPartitioner:
    """murmur2 of the key over all partitions; keyless: a random available partition.

    (The producer applies stickiness on top for keyless records when this
    default is in use; a custom partitioner is asked for every record.)
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def __call__(
        self, key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]
    ) -> int:
        if key is not None:
            return all_partitions[partition_for_key(key, len(all_partitions))]
        return self._rng.choice(available or all_partitions)


B = TypeVar("B")


class StickyPartitions(Generic[B]):
    """Per topic, the partition keyless records stick to and the batch they fill.

    The producer appends a keyless record straight to ``batches[topic]`` while that
    batch takes records; once it is full or sent (closed), :meth:`switch`
    picks a new partition — another than the last when there is a choice —
    and :meth:`stick` remembers the batch the record went into.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._partitions: dict[str, int] = {}
        self.batches: dict[str, B] = {}
        """topic -> the batch keyless records go into (a plain dict: read once per record)."""

    def partition(self, topic: str) -> int | None:
        """The current sticky partition of ``topic`` (None before the first record)."""
        return self._partitions.get(topic)

    def switch(self, topic: str, all_partitions: Sequence[int], available: Sequence[int]) -> int:
        """A new sticky partition: random among the available, avoiding the previous one."""
        choices = list(available or all_partitions)
        previous = self._partitions.get(topic)
        if previous is not None and len(choices) > 1 and previous in choices:
            choices.remove(previous)
        return self._rng.choice(choices)

    def stick(self, topic: str, partition: int, batch: B) -> None:
        self._partitions[topic] = partition
        self.batches[topic] = batch

    def forget(self, topic: str) -> None:
        self._partitions.pop(topic, None)
        self.batches.pop(topic, None)

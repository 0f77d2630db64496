"""Committed offsets of consumer groups, kept in the internal topic ``__consumer_offsets``.

A commit is a record batch appended to the partition the group hashes to:
key ``msgpack([0, group, topic, partition])``, value ``msgpack([offset,
leader_epoch, metadata, commit_ms])`` (a null value deletes the entry). The
latest record per key wins, so the topic is ``cleanup.policy=compact``. On
start the store reads every partition once and keeps the result in memory;
answers to offset_fetch come from there.

Because the offsets live in a topic, they get the same durability as user
data (replicated; a commit is acknowledged with acks=all), and the group
coordinator moves with that partition's leader: the broker leading offsets
partition ``p`` coordinates the groups that hash to ``p``.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable
from typing import NamedTuple

import msgpack

from mq.broker.broker import Broker
from mq.broker.catalog import OFFSETS_TOPIC
from mq.broker.internal_records import records_or_skip, skipped
from mq.broker.partition import Partition
from mq.errors import (
    CoordinatorLoadInProgressError,
    CorruptRecordError,
    MQError,
    NotCoordinatorError,
)
from mq.groups.assignors import TopicPartition
from mq.records.records import RecordInput, build_batch
from mq.storage.segment import Slice

log = logging.getLogger(__name__)

OFFSET_KEY = 0
"""Key type of an offset commit (other key types are reserved for group metadata)."""
MAX_METADATA_BYTES = 4096
"""Kafka's offset.metadata.max.bytes."""
LOAD_READ_BYTES = 1 << 20
SEGMENT_BYTES = 100 * 1024 * 1024
"""Segments of the offsets topic roll at this size, or the broker's default if smaller
(Kafka's offsets.topic.segment.bytes): the cleaner compacts closed segments only."""


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


class OffsetStore:
    """Group → partition → committed offset, persisted in ``__consumer_offsets``.

    Only the groups of the offsets partitions this broker leads are held: a
    partition is loaded (read once from its log) when this broker becomes its
    leader, and forgotten when it stops leading it.
    """

    def __init__(self, broker: Broker, partitions: int) -> None:
        self._broker = broker
        self._default_partitions = partitions
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.loaded: set[int] = set()
        self._loading: dict[int, asyncio.Task[None]] = {}
        self.on_unload: Callable[[int], None] | None = None
        """Called with an offsets partition's index when this broker stops leading it."""

    @property
    def partitions(self) -> int:
        topic = self._broker.topic(OFFSETS_TOPIC)
        return topic.partitions if topic is not None else self._default_partitions

    async def ensure_topic(self) -> None:
        """Create the topic if it does not exist yet (on the controller)."""
        await self._broker.topics.ensure_topic(
            OFFSETS_TOPIC,
            self._default_partitions,
            self._broker.config.offsets_replication_factor,
            self.topic_configs(),
            internal=True,
        )

    def topic_configs(self) -> dict[str, str]:
        segment_bytes = min(SEGMENT_BYTES, self._broker.config.log.segment_bytes)
        return {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}

    def partition_changed(self, partition: Partition) -> None:
        """The replica of an offsets partition here changed role (or went)."""
        index = partition.index
        leads = (
            partition.is_leader and self._broker.partitions.get((OFFSETS_TOPIC, index)) is partition
        )
        if leads and index not in self.loaded and index not in self._loading:
            task = asyncio.get_running_loop().create_task(self._load_task(partition))
            self._loading[index] = task
        elif not leads and (index in self.loaded or index in self._loading):
            loading = self._loading.pop(index, None)
            if loading is not None:
                loading.cancel()
            self._unload(index)

    async def _load_task(self, partition: Partition) -> None:
        try:
            count = await self._load(partition)
        except MQError as exc:
            log.error("loading %s: %s", partition.name, exc)
            self._loading.pop(partition.index, None)
            return
        if self._loading.pop(partition.index, None) is None:
            return  # unloaded meanwhile
        self.loaded.add(partition.index)
        log.info("loaded %d offset commits from %s", count, partition.name)

    def _unload(self, index: int) -> None:
        self.loaded.discard(index)
        for group in [g for g in self._offsets if self.partition_for(g) == index]:
            del self._offsets[group]
        if self.on_unload is not None:
            self.on_unload(index)

    def require(self, group: str) -> None:
        """Raise unless this broker coordinates ``group`` now."""
        index = self.partition_for(group)
        if index in self.loaded:
            return
        if index in self._loading:
            raise CoordinatorLoadInProgressError(f"group {group}: loading its offsets")
        raise NotCoordinatorError(f"this broker does not coordinate group {group}")

    async def _load(self, partition: Partition) -> int:
        """Every commit of the partition, a chunk at a time (others are served meanwhile)."""
        offset, count, end = partition.log.log_start_offset, 0, partition.local_end
        found: Slice | None
        loaded: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        while (found := partition.log.read_plain(offset, LOAD_READ_BYTES, end)) is not None:
            data, pos = found.data, 0
            while pos < len(data):
                size = int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
                for record in records_or_skip(data[pos : pos + size], partition.name):
                    try:
                        count += _apply(loaded, record.key, record.value)
                    except CorruptRecordError as exc:
                        skipped(partition.name, record.offset, exc)
                pos += size
            offset = found.next_offset
            del data, found
            await asyncio.sleep(0)
        self._offsets.update(loaded)
        return count

    def partition_for(self, group: str) -> int:
        """The offsets partition (and so the coordinator) of a group: stable across restarts."""
        return zlib.crc32(group.encode()) % self.partitions

    async def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Append the commits as one batch; they count once the append is acknowledged."""
        if not offsets:
            return
        now = int(time.time() * 1000)
        records: list[RecordInput] = [
            (
                msgpack.packb([OFFSET_KEY, group, tp.topic, tp.partition]),
                msgpack.packb(list(c)),
                [],
                now,
            )
            for tp, c in offsets.items()
        ]
        self.require(group)
        partition = self._broker.leader_partition(OFFSETS_TOPIC, self.partition_for(group))
        await partition.append(build_batch(records), acks=-1)
        self._offsets.setdefault(group, {}).update(offsets)

    def committed(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._offsets.get(group, {}))

    def groups(self) -> list[str]:
        return [group for group, offsets in self._offsets.items() if offsets]


def _apply(
    into: dict[str, dict[TopicPartition, CommittedOffset]], key: bytes | None, value: bytes | None
) -> int:
    """Apply one record; :class:`CorruptRecordError` (nothing applied) when it does not decode."""
    try:
        kind, group, topic, partition = msgpack.unpackb(key or b"")
        if kind != OFFSET_KEY:
            return 0
        if not (isinstance(group, str) and isinstance(topic, str) and type(partition) is int):
            raise ValueError(f"key {[kind, group, topic, partition]!r} is not [0, str, str, int]")
        tp = TopicPartition(topic, partition)
        if value is None:
            into.get(group, {}).pop(tp, None)
            return 1
        committed = CommittedOffset(*msgpack.unpackb(value))
        if type(committed.offset) is not int or type(committed.leader_epoch) is not int:
            raise ValueError(f"value {list(committed)!r} is not [int, int, ...]")
        into.setdefault(group, {})[tp] = committed
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptRecordError(f"bad record in {OFFSETS_TOPIC}: {exc}") from exc
    return 1

"""Committed offsets of consumer groups, kept in the internal topic ``__consumer_offsets``.

A commit is a record batch appended to the partition the group hashes to:
key ``msgpack([0, group, topic, partition])``, value ``msgpack([offset,
leader_epoch, metadata, commit_ms])`` (a null value deletes the entry). The
latest record per key wins, so the topic is ``cleanup.policy=compact``. On
start the store reads every partition once and keeps the result in memory;
answers to offset_fetch come from there.

Because the offsets live in a topic, they get the same durability as user
data (the writer's flush policy, and replication once it exists), and the
group coordinator can move with that partition's leader.

Thread safety: one event loop.
"""

from __future__ import annotations

import logging
import time
import zlib
from typing import NamedTuple

import msgpack

from mq.broker.broker import Broker
from mq.errors import CorruptRecordError, TopicAlreadyExistsError
from mq.groups.assignors import TopicPartition
from mq.storage.records import RecordInput, build_batch, decode_records

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
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
    """Group → partition → committed offset, persisted in ``__consumer_offsets``."""

    def __init__(self, broker: Broker, partitions: int) -> None:
        self._broker = broker
        self._partitions = partitions
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    async def start(self) -> None:
        """Create the topic on first start, then load every commit in it."""
        try:
            segment_bytes = min(SEGMENT_BYTES, self._broker.config.log.segment_bytes)
            configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
            self._broker.create_topic(OFFSETS_TOPIC, self._partitions, 1, configs, internal=True)
        except TopicAlreadyExistsError:
            pass
        info = self._broker.catalog.get(OFFSETS_TOPIC)
        assert info is not None
        self._partitions = info.partitions
        loaded = sum(self._load(index) for index in range(self._partitions))
        log.info("loaded %d offset commits of %d groups", loaded, len(self._offsets))

    def _load(self, index: int) -> int:
        partition = self._broker.partition(OFFSETS_TOPIC, index)
        offset, count = partition.log.log_start_offset, 0
        while (found := partition.read(offset, LOAD_READ_BYTES)) is not None:
            data, pos = found.data, 0
            while pos < len(data):
                size = int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
                for record in decode_records(data[pos : pos + size]):
                    count += self._apply(record.key, record.value)
                pos += size
            offset = found.next_offset
            del data, found
        return count

    def _apply(self, key: bytes | None, value: bytes | None) -> int:
        try:
            kind, group, topic, partition = msgpack.unpackb(key or b"")
            if kind != OFFSET_KEY:
                return 0
            tp = TopicPartition(topic, partition)
            if value is None:
                self._offsets.get(group, {}).pop(tp, None)
            else:
                self._offsets.setdefault(group, {})[tp] = CommittedOffset(*msgpack.unpackb(value))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise CorruptRecordError(f"bad record in {OFFSETS_TOPIC}: {exc}") from exc
        return 1

    def partition_for(self, group: str) -> int:
        """The offsets partition (and so the coordinator) of a group: stable across restarts."""
        return zlib.crc32(group.encode()) % self._partitions

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
        partition = self._broker.partition(OFFSETS_TOPIC, self.partition_for(group))
        await partition.append(build_batch(records))
        self._offsets.setdefault(group, {}).update(offsets)

    def committed(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._offsets.get(group, {}))

    def groups(self) -> list[str]:
        return [group for group, offsets in self._offsets.items() if offsets]

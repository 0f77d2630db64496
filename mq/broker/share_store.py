"""Share groups' state, kept in the internal topic ``__share_state``.

One record per save of a share partition (group, topic, partition): key
``msgpack([group, topic, partition])``, value ``msgpack({...})`` holding the
data topic's id, the data partition's leader epoch at the save and the
snapshot of :meth:`mq.queues.share_partition.SharePartition.snapshot`. Each
record is complete, so the topic is compacted and the latest record per key
is the state. A load reads the state partition the key hashes to and keeps,
per key, the latest record of the highest leader epoch (a deposed leader's
late write does not win over its successor's) whose topic id is the data
topic's (a topic deleted and created again starts afresh).

The partition that saves a share partition's state is led by whichever broker
the cluster chose; :mod:`mq.broker.cluster_io` appends there with acks=all, so
the state survives the loss of the broker that wrote it.

Thread safety: one event loop.
"""

from __future__ import annotations

import time
import zlib
from typing import TYPE_CHECKING, Any, NamedTuple

import msgpack

from mq.broker import cluster_io
from mq.broker.catalog import SHARE_STATE_TOPIC
from mq.broker.internal_records import records_or_skip, skipped
from mq.errors import CorruptRecordError
from mq.records.batch import split_batches
from mq.records.records import build_batch

if TYPE_CHECKING:
    from mq.broker.broker import Broker

SEGMENT_BYTES = 100 * 1024 * 1024
"""Segments roll at this size (or the broker's default if smaller): the cleaner
compacts closed segments only."""


class ShareKey(NamedTuple):
    group: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        return msgpack.packb([self.group, self.topic, self.partition])


class ShareStateStore:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def partitions(self) -> int:
        topic = self._broker.topic(SHARE_STATE_TOPIC)
        return topic.partitions if topic is not None else self._broker.config.share_state_partitions

    def partition_for(self, key: ShareKey) -> int:
        """The state partition of a share partition: stable across restarts."""
        return zlib.crc32(key.encode()) % self.partitions

    async def ensure_topic(self) -> None:
        config = self._broker.config
        await self._broker.ensure_topic(
            SHARE_STATE_TOPIC,
            config.share_state_partitions,
            config.offsets_replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(min(SEGMENT_BYTES, config.log.segment_bytes)),
            },
            internal=True,
        )

    async def save(self, key: ShareKey, topic_id: str, epoch: int, state: dict[str, Any]) -> None:
        """Append the state of ``key`` (acks=all); it counts once this returns."""
        value = msgpack.packb({"topic_id": topic_id, "epoch": epoch, "state": state})
        batch = build_batch([(key.encode(), value, [], int(time.time() * 1000))])
        await cluster_io.append(self._broker, SHARE_STATE_TOPIC, self.partition_for(key), batch)

    async def load(self, key: ShareKey, topic_id: str) -> dict[str, Any] | None:
        """The latest saved state of ``key`` for this incarnation of its topic, if any."""
        wanted = key.encode()
        best: tuple[int, dict[str, Any]] | None = None
        index = self.partition_for(key)
        async for chunk in cluster_io.read(self._broker, SHARE_STATE_TOPIC, index, 0):
            for _, batch in split_batches(chunk):
                for record in records_or_skip(batch, f"{SHARE_STATE_TOPIC}-{index}"):
                    if record.key != wanted or record.value is None:
                        continue
                    try:
                        saved = _decode(record.value)
                    except CorruptRecordError as exc:  # skipped, logged once
                        skipped(f"{SHARE_STATE_TOPIC}-{index}", record.offset, exc)
                        continue
                    if saved["topic_id"] != topic_id:
                        continue
                    if best is None or saved["epoch"] >= best[0]:
                        best = (saved["epoch"], saved["state"])
        return None if best is None else best[1]


def _decode(value: bytes) -> dict[str, Any]:
    try:
        saved = msgpack.unpackb(value)
        if not isinstance(saved, dict) or not {"topic_id", "epoch", "state"} <= saved.keys():
            raise ValueError("missing fields")
        if type(saved["epoch"]) is not int or not isinstance(saved["state"], dict):
            raise ValueError("epoch is not an int or state not a map")
        return saved
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptRecordError(f"bad record in {SHARE_STATE_TOPIC}: {exc}") from exc

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

**Fences.** A load starts by appending a *fence* (key
``msgpack([group, topic, partition, 0])``, value ``{"topic_id", "epoch", "fence": true}``)
with the loader's leader epoch, and then reads the state partition at least up to
that fence: everything acknowledged before it (every save of a previous leader) is
below it, so a load never misses a save, even from a leader whose high watermark
has not caught up yet (it waits, bounded, for it). The leader of the state
partition admits a save or a fence only if its epoch is at least the highest it has
admitted for that share partition and the data partition's epoch in its view
(:meth:`ShareStateStore.admit`): once a new leader has fenced, a deposed leader's
saves are refused (FENCED_LEADER_EPOCH), and since a receive answers only once its
save is acknowledged, a deposed leader cannot lease a message the new one may lease.
Fences and states have different keys, so compaction keeps the latest of each.

The admitted epochs are remembered only where the metadata view does not already
say as much: an epoch at or below the data partition's leader epoch in the view (for
the same topic id) adds nothing, since the view's epoch never goes down. So the
table holds only share partitions whose leader this broker's view has not caught up
with, plus, past ``share_fence_entries``, nothing older than the newest three
quarters of them (entries the view covers or of a recreated topic go first; if the
view lags for more share partitions than that, the oldest are forgotten, which only
weakens the fence for those until the view catches up).

Thread safety: one event loop.
"""

from __future__ import annotations

import time
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import msgpack

from mq.broker import cluster_io
from mq.broker.catalog import SHARE_STATE_TOPIC
from mq.broker.internal_records import records_or_skip, skipped
from mq.errors import CorruptRecordError, FencedLeaderEpochError
from mq.records.batch import split_batches
from mq.records.records import build_batch, decode_records

if TYPE_CHECKING:
    from mq.broker.broker import Broker

EPOCH_HEADER = "mq.share.epoch"
TOPIC_ID_HEADER = "mq.share.topic_id"
SEGMENT_BYTES = 100 * 1024 * 1024
"""Segments roll at this size (or the broker's default if smaller): the cleaner
compacts closed segments only."""
MAX_FENCE_ENTRIES = 10_000
"""Admitted epochs remembered beyond the metadata view (~250 B each): the view lags
the controller by a heartbeat at most, so only share partitions whose leader changed
in that time need one (broker key ``share_fence_entries``)."""


class ShareKey(NamedTuple):
    group: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        return msgpack.packb([self.group, self.topic, self.partition])

    def encode_fence(self) -> bytes:
        return msgpack.packb([self.group, self.topic, self.partition, 0])


class ShareStateStore:
    def __init__(self, broker: Broker, max_fence_entries: int = MAX_FENCE_ENTRIES) -> None:
        self._broker = broker
        self._epochs: OrderedDict[tuple[ShareKey, str], int] = OrderedDict()
        """The highest epoch admitted per (share partition, topic id) while leading a
        state partition here, where it is above the view's epoch: oldest first."""
        self.max_fence_entries = max_fence_entries

    @property
    def partitions(self) -> int:
        topic = self._broker.topic(SHARE_STATE_TOPIC)
        return topic.partitions if topic is not None else self._broker.config.share_state_partitions

    def partition_for(self, key: ShareKey) -> int:
        """The state partition of a share partition: stable across restarts."""
        return zlib.crc32(key.encode()) % self.partitions

    async def ensure_topic(self) -> None:
        config = self._broker.config
        await self._broker.topics.ensure_topic(
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
        """Append the state of ``key`` (acks=all); it counts once this returns.
        FencedLeaderEpochError if a leader of a later epoch has fenced ``key``."""
        value = msgpack.packb({"topic_id": topic_id, "epoch": epoch, "state": state})
        await self._append(key, key.encode(), value, topic_id, epoch)

    async def fence(self, key: ShareKey, topic_id: str, epoch: int) -> int:
        """Fence off the saves of earlier epochs of ``key``; the fence's offset."""
        value = msgpack.packb({"topic_id": topic_id, "epoch": epoch, "fence": True})
        return await self._append(key, key.encode_fence(), value, topic_id, epoch)

    async def _append(
        self, key: ShareKey, record_key: bytes, value: bytes, topic_id: str, epoch: int
    ) -> int:
        # The headers repeat the value's topic id and epoch: admit() reads them, not
        # the (possibly large) state.
        headers = [(TOPIC_ID_HEADER, topic_id.encode()), (EPOCH_HEADER, b"%d" % epoch)]
        batch = build_batch([(record_key, value, headers, int(time.time() * 1000))])
        index = self.partition_for(key)
        return await cluster_io.append(
            self._broker, SHARE_STATE_TOPIC, index, batch, admit=self.admit
        )

    def admit(self, batch: bytes) -> None:
        """On the leader of a state partition, before an append: refuse a save or fence
        of an epoch older than one admitted for its share partition, or than the data
        partition's epoch in this broker's view (FencedLeaderEpochError)."""
        view = self._broker.view
        admitted: list[tuple[tuple[ShareKey, str], int]] = []
        for _, one in split_batches(batch):
            for record in decode_records(one):
                if record.key is None or record.value is None:
                    continue
                key = _decode_key(record.key)
                epoch, topic_id = _epoch_of(record.headers, record.value)
                slot = (key, topic_id)
                state = view.partitions.get((key.topic, key.partition))
                topic = view.topics.get(key.topic)
                current = self._epochs.get(slot, -1)
                if state is not None and topic is not None and topic.topic_id == slot[1]:
                    current = max(current, state.leader_epoch)
                if epoch < current:
                    raise FencedLeaderEpochError(
                        f"share state of {key.group} on {key.topic}-{key.partition}: "
                        f"epoch {epoch} was fenced by epoch {current}"
                    )
                admitted.append((slot, epoch))
        for slot, epoch in admitted:
            if epoch <= self._view_epoch(slot):
                self._epochs.pop(slot, None)  # the view says as much
            elif epoch > self._epochs.get(slot, -1):
                self._epochs[slot] = epoch
                self._epochs.move_to_end(slot)
        if len(self._epochs) > self.max_fence_entries:
            self._prune()

    def _view_epoch(self, slot: tuple[ShareKey, str]) -> int:
        """The data partition's leader epoch in this broker's view (-1: another topic id)."""
        key, topic_id = slot
        view = self._broker.view
        topic = view.topics.get(key.topic)
        state = view.partitions.get((key.topic, key.partition))
        if topic is None or state is None or topic.topic_id != topic_id:
            return -1
        return state.leader_epoch

    def _prune(self) -> None:
        """Drop what the view covers or an earlier incarnation's of a topic (a topic the
        view does not know yet keeps its entries); then the oldest, down to three
        quarters of the bound (so the next prune is that many admits away)."""
        view = self._broker.view
        for slot, epoch in list(self._epochs.items()):
            topic = view.topics.get(slot[0].topic)
            recreated = topic is not None and topic.topic_id != slot[1]
            if recreated or epoch <= self._view_epoch(slot):
                del self._epochs[slot]
        keep = self.max_fence_entries * 3 // 4
        while len(self._epochs) > keep:
            self._epochs.popitem(last=False)

    async def load(self, key: ShareKey, topic_id: str, epoch: int) -> dict[str, Any] | None:
        """Fence ``key`` at ``epoch``, then the latest saved state of ``key`` for this
        incarnation of its topic, if any (raises FencedLeaderEpochError if a later epoch
        fenced it already)."""
        fenced_at = await self.fence(key, topic_id, epoch)
        wanted = key.encode()
        best: tuple[int, dict[str, Any]] | None = None
        index = self.partition_for(key)
        wait_s = self._broker.config.share_state_load_wait_ms / 1000
        chunks = cluster_io.read(self._broker, SHARE_STATE_TOPIC, index, 0, fenced_at + 1, wait_s)
        async for chunk in chunks:
            for _, batch in split_batches(chunk):
                for record in records_or_skip(batch, f"{SHARE_STATE_TOPIC}-{index}"):
                    if record.key != wanted or record.value is None:
                        continue
                    try:
                        saved = _decode(record.value)
                    except CorruptRecordError as exc:  # skipped, logged once
                        skipped(f"{SHARE_STATE_TOPIC}-{index}", record.offset, exc)
                        continue
                    if saved["topic_id"] != topic_id or "state" not in saved:
                        continue
                    if best is None or saved["epoch"] >= best[0]:
                        best = (saved["epoch"], saved["state"])
        return None if best is None else best[1]


def _epoch_of(headers: Sequence[tuple[str, bytes | None]], value: bytes) -> tuple[int, str]:
    """A saved record's leader epoch and topic id: from its headers, else its value."""
    found = dict(headers)
    epoch, topic_id = found.get(EPOCH_HEADER), found.get(TOPIC_ID_HEADER)
    if epoch is not None and topic_id is not None and epoch.isdigit():
        return int(epoch), topic_id.decode("utf-8", "replace")
    saved = _decode(value)
    return int(saved["epoch"]), str(saved["topic_id"])


def _decode_key(raw: bytes) -> ShareKey:
    try:
        fields = msgpack.unpackb(raw)
        if not isinstance(fields, list) or len(fields) not in (3, 4):
            raise ValueError("not a share key")
        return ShareKey(str(fields[0]), str(fields[1]), int(fields[2]))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptRecordError(f"bad key in {SHARE_STATE_TOPIC}: {exc}") from exc


def _decode(value: bytes) -> dict[str, Any]:
    try:
        saved = msgpack.unpackb(value)
        if not isinstance(saved, dict) or not {"topic_id", "epoch"} <= saved.keys():
            raise ValueError("missing fields")
        if type(saved["epoch"]) is not int or not isinstance(saved.get("state", {}), dict):
            raise ValueError("epoch is not an int or state not a map")
        return saved
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptRecordError(f"bad record in {SHARE_STATE_TOPIC}: {exc}") from exc

"""One assigned partition's consumer state: positions and raw fetched batches.

A fetch response's record batches are kept as they came (:meth:`PartitionState.append`
reads only their headers, to know where the next fetch starts). Records are
decoded one batch at a time when the application takes them
(:meth:`PartitionState.take`), with :func:`~mq.records.records.decode_records`,
which checks each batch's CRC; records below the position (the first batch of
a fetch may start before it) and control batches are skipped.

``position`` is the next offset the application gets; ``fetch_offset`` the
next offset to fetch; ``epoch`` counts seeks, so that the fetcher can drop a
response to a request made before one. Not thread-safe: one event loop.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import NamedTuple

from mq.client.types import ConsumerRecord, TopicPartition
from mq.errors import MQError
from mq.records.batch import CONTROL_BIT, LOG_OVERHEAD, RECORDS_AT
from mq.records.records import decode_records

_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_ATTRS_AT = 21
_LAST_DELTA_AT = 23


class RawRecords(NamedTuple):
    """Fetched record batches, undecoded (see :meth:`PartitionState.take_raw`)."""

    data: bytes
    """Whole RecordBatch v2 batches, back to back, as the broker sent them."""
    position: int
    """The first offset the consumer had not handed out: skip records below it."""
    next_offset: int
    """The offset after the last batch: the consumer's position now."""


class _Chunk:
    """The raw batches of one fetch for one partition, and the batch being handed out."""

    __slots__ = ("batch_at", "index", "next_offset", "pos", "raw", "records")

    def __init__(self, raw: bytes, next_offset: int) -> None:
        self.raw = raw
        self.next_offset = next_offset
        """The offset after the last batch of ``raw``."""
        self.pos = 0
        """Where the next undecoded batch starts in ``raw``."""
        self.batch_at = 0
        """Where the batch being handed out (``records``) starts in ``raw``."""
        self.records: list[ConsumerRecord] = []
        self.index = 0
        """The next record of ``records`` (the decoded batch) to hand out."""


class PartitionState:
    """Where one assigned partition is: positions, buffered data, flags."""

    __slots__ = (
        "buffered",
        "chunks",
        "epoch",
        "error",
        "fetch_offset",
        "fetching",
        "high_watermark",
        "paused",
        "position",
        "reset",
    )

    def __init__(self, position: int | None, reset: str | None) -> None:
        self.position = position
        self.fetch_offset = position
        self.reset = reset if position is None else None
        """"committed"/"earliest"/"latest" while the position must be looked up."""
        self.chunks: deque[_Chunk] = deque()
        self.buffered = 0
        self.epoch = 0
        self.fetching = False
        self.paused = False
        self.high_watermark = -1
        self.error: MQError | None = None

    def seek(self, offset: int | None, reset: str | None = None) -> None:
        """Go to ``offset`` (None: look it up by ``reset``); buffered data is dropped."""
        self.position = self.fetch_offset = offset
        self.reset = reset if offset is None else None
        self.chunks.clear()
        self.buffered = 0
        self.epoch += 1
        self.error = None

    def append(self, raw: bytes) -> bool:
        """Keep the whole batches of a fetch, undecoded; the next fetch starts after them."""
        end, next_offset = walk(raw)
        if not end:
            return False
        self.chunks.append(_Chunk(raw if end == len(raw) else raw[:end], next_offset))
        self.buffered += end
        self.fetch_offset = next_offset
        return True

    def take(self, tp: TopicPartition, budget: int) -> list[ConsumerRecord]:
        """Up to ``budget`` records from the position on, decoding batches as needed.

        Raises CorruptRecordError for a batch that fails its CRC or structure.
        """
        out: list[ConsumerRecord] = []
        chunks = self.chunks
        while chunks and budget > 0:
            chunk = chunks[0]
            records, index = chunk.records, chunk.index
            if index >= len(records):
                if not self._decode_next(chunk, tp):
                    chunks.popleft()
                    self.buffered -= len(chunk.raw)
                continue
            taken = records[index : index + budget]
            chunk.index = index = index + len(taken)
            budget -= len(taken)
            out += taken
            self.position = taken[-1].offset + 1
            if index >= len(records) and chunk.pos >= len(chunk.raw):
                chunks.popleft()  # all handed out: make room for the next fetch now
                self.buffered -= len(chunk.raw)
        return out

    def take_raw(self) -> RawRecords | None:
        """The next fetched chunk as it came: whole batches, not decoded, CRCs unchecked.

        Records below ``position`` in it (the first batch of a fetch may start
        before the position, or a batch may be half handed out by :meth:`take`)
        are the caller's to skip; the position moves past the chunk.
        """
        if not self.chunks or self.position is None:
            return None
        chunk = self.chunks.popleft()
        self.buffered -= len(chunk.raw)
        pending = chunk.index < len(chunk.records)
        start = chunk.batch_at if pending else chunk.pos
        position = self.position
        self.position = max(position, chunk.next_offset)
        return RawRecords(chunk.raw[start:] if start else chunk.raw, position, chunk.next_offset)

    def _decode_next(self, chunk: _Chunk, tp: TopicPartition) -> bool:
        """Decode the chunk's next batch into ``chunk.records``; False when none is left.

        Batches wholly below the position and control batches are skipped
        without decoding; inside the first batch, records below the position.
        """
        raw, pos = chunk.raw, chunk.pos
        position = self.position if self.position is not None else 0
        while pos < len(raw):
            chunk.batch_at = pos
            base, length = _HEAD.unpack_from(raw, pos)
            size = length + LOG_OVERHEAD
            batch = raw[pos : pos + size]
            pos += size
            last = base + struct.unpack_from(">i", batch, _LAST_DELTA_AT)[0]
            control = struct.unpack_from(">h", batch, _ATTRS_AT)[0] & CONTROL_BIT
            if last < position or control:
                if control and last >= position:
                    self.position = position = last + 1
                continue
            records: list[ConsumerRecord] = decode_records(
                batch, shape=(ConsumerRecord, tp.topic, tp.partition)
            )  # type: ignore[assignment]
            index = 0
            if records and records[0].offset < position:
                while index < len(records) and records[index].offset < position:
                    index += 1
            chunk.pos, chunk.records, chunk.index = pos, records, index
            if index < len(records):
                return True
        chunk.pos, chunk.records, chunk.index = pos, [], 0
        return False


def walk(raw: bytes) -> tuple[int, int]:
    """(end of the whole batches in ``raw``, the offset after the last of them)."""
    pos, end, next_offset = 0, len(raw), -1
    while end - pos >= RECORDS_AT:
        base, length = _HEAD.unpack_from(raw, pos)
        size = length + LOG_OVERHEAD
        if size < RECORDS_AT or pos + size > end:
            break
        next_offset = base + struct.unpack_from(">i", raw, pos + _LAST_DELTA_AT)[0] + 1
        pos += size
    return pos, next_offset

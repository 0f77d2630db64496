"""Kafka RecordBatch v2: the one format mq keeps on disk and sends on the wire.

Byte layout, big-endian, offsets from the start of the batch::

     0  baseOffset            int64   first offset of the batch (the broker writes it)
     8  batchLength           int32   bytes that follow this field (= total size - 12)
    12  partitionLeaderEpoch  int32   the leader's epoch at append (the broker writes it)
    16  magic                 int8    always 2
    17  crc                   uint32  CRC-32C (Castagnoli) of bytes [21, end)
    21  attributes            int16   bits 0-2 codec, 3 timestamp type, 4 transactional,
                                      5 control batch, 6 delete horizon (the cleaner's),
                                      7 encrypted at rest (the broker's, see below)
    23  lastOffsetDelta       int32   offset of the last record minus baseOffset
    27  baseTimestamp         int64   timestamp of the first record (ms)
    35  maxTimestamp          int64   largest record timestamp (ms)
    43  producerId            int64   -1 unless the producer is idempotent
    51  producerEpoch         int16
    53  baseSequence          int32   sequence number of the first record, -1 if none
    57  recordsCount          int32
    61  records               recordsCount records, compressed as one block when
                              the codec is not none (see :mod:`mq.records.records`)

Why the CRC starts at byte 21: everything before it is what a broker changes
when it appends (baseOffset, and partitionLeaderEpoch). A producer computes the
CRC once; the broker checks it and assigns offsets by rewriting the first 8
bytes in place; the same CRC then holds on disk, on a follower and at the
consumer. The broker never looks inside the records on its hot path.

Encrypted at rest (``--encryption-key-file``, :mod:`mq.records.encryption`):
attribute bit 7 set, the header otherwise in clear, and the records section
replaced by ``keyId u32 | nonce 12 B | AES-256-GCM ciphertext of the records
section | tag 16 B``; batchLength counts those 32 extra bytes and the CRC covers
the stored bytes, as for any batch, so everything that checks CRCs works on
encrypted segments without a key. Only a broker sets the bit: producers may
not, consumers never see it (a fetch opens the batch
back into its plain form), followers store it as the leader does.

This module works on headers only: parse, check, rewrite. Building and decoding
records lives in :mod:`mq.records.records`.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from typing import NamedTuple, TypeAlias

from crc32c import crc32c

from mq.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)

MAGIC = 2

BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
RECORDS_AT = 61

LOG_OVERHEAD = 12
"""Bytes before batchLength's count starts: baseOffset and batchLength."""
HEADER_SIZE = RECORDS_AT
"""A batch with zero records is this big; nothing smaller is a batch."""

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
MAX_CODEC = 4
"""zstd; 5 to 7 name no codec."""
DELETE_HORIZON_BIT = 0x40
"""Set by the log cleaner: baseTimestamp holds the time after which the batch's
tombstones may go (Kafka's KIP-534); record timestamps stay base + delta."""
ENCRYPTED_BIT = 0x80
"""Set by a broker that encrypts at rest: the records section is sealed
(:mod:`mq.records.encryption`). Bit 7 is unused by Kafka."""

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_STRUCT = _HEADER
"""The header's fields as one struct (for code that packs a header apart from its batch)."""
_BASE_OFFSET = struct.Struct(">q")
_OFFSET_AND_EPOCH = struct.Struct(">qii")
_LENGTH = struct.Struct(">qi")
_CRC = struct.Struct(">I")

Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
WritableBuffer: TypeAlias = bytearray | memoryview | mmap.mmap


class BatchHeader(NamedTuple):
    """The 61-byte header of one batch, as parsed (nothing is checked here)."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; the caller makes sure 61 bytes are there."""
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def batch_size_at(buf: Buffer, pos: int = 0) -> int:
    """Total size of the batch starting at ``pos`` as its length field claims."""
    return int(_LENGTH.unpack_from(buf, pos)[1]) + LOG_OVERHEAD


def compute_crc(batch: Buffer) -> int:
    """CRC-32C of a whole batch's [attributes, end) range."""
    return int(crc32c(memoryview(batch)[ATTRIBUTES_AT:]))


def check_batch(buf: Buffer, pos: int, end: int) -> BatchHeader:
    """Check the structure of the batch at ``buf[pos:end]`` and return its header.

    Checks what a reader or a recovering log can check without decoding records:
    the length fits in ``[pos, end)``, the magic byte, the CRC and the offset
    delta. Raises :class:`CorruptRecordError` saying what is wrong.
    """
    if end - pos < HEADER_SIZE:
        raise CorruptRecordError(f"{end - pos} bytes left, a batch header needs {HEADER_SIZE}")
    header = parse_header(buf, pos)
    size = header.size
    if size < HEADER_SIZE:
        raise CorruptRecordError(f"batch length {header.batch_length} is below the minimum")
    if size > end - pos:
        raise CorruptRecordError(f"batch of {size} bytes runs past the end ({end - pos} left)")
    if header.magic != MAGIC:
        raise CorruptRecordError(f"magic byte is {header.magic}, expected {MAGIC}")
    actual = crc32c(memoryview(buf)[pos + ATTRIBUTES_AT : pos + size])
    if actual != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}"
        )
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError("negative lastOffsetDelta or recordsCount")
    return header


def validate_produced(
    buf: Buffer,
    *,
    max_batch_bytes: int,
    now_ms: int | None = None,
    max_timestamp_skew_ms: int | None = None,
    max_future_ms: int | None = None,
) -> list[BatchHeader]:
    """Check a producer's batches (one or more laid back to back) before an append.

    On top of :func:`check_batch`: at least one record, ``lastOffsetDelta + 1 ==
    recordsCount`` (a producer numbers its records densely from 0), no control
    batches or cleaner flags from clients, a known codec, a size limit, and
    sane timestamps (``-1`` or at least 0, ``maxTimestamp >= baseTimestamp``,
    within ``max_timestamp_skew_ms`` of ``now_ms`` when both are given, and not
    more than ``max_future_ms`` after it).
    Per-batch work only: the records are checked next, by
    :func:`mq.records.records.validate_produced_records` (a batch whose CRC
    holds over unparseable records would otherwise be stored and fail at every
    consumer).
    """
    headers = []
    pos = 0
    end = len(buf)
    if end == 0:
        raise InvalidRecordError("no record batch in the request")
    while pos < end:
        header = check_batch(buf, pos, end)
        if header.size > max_batch_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds the limit of {max_batch_bytes}"
            )
        if header.records_count < 1:
            raise InvalidRecordError("a produced batch must hold at least one record")
        if header.last_offset_delta + 1 != header.records_count:
            raise InvalidRecordError(
                f"lastOffsetDelta {header.last_offset_delta} does not match "
                f"recordsCount {header.records_count}"
            )
        if header.is_control:
            raise InvalidRecordError("clients may not produce control batches")
        if header.codec > MAX_CODEC:
            raise UnsupportedCompressionError(f"batch attributes name codec {header.codec}")
        if header.attributes & DELETE_HORIZON_BIT:
            raise InvalidRecordError("the delete-horizon flag is the log cleaner's, not a client's")
        if header.attributes & ENCRYPTED_BIT:
            raise InvalidRecordError("the encrypted flag (attribute bit 7) is the broker's")
        _check_timestamps(header, now_ms, max_timestamp_skew_ms)
        if (
            now_ms is not None
            and max_future_ms is not None
            and header.max_timestamp > now_ms + max_future_ms
        ):
            raise InvalidTimestampError(
                f"timestamp {header.max_timestamp} is more than {max_future_ms} ms after "
                f"the broker's clock ({now_ms}): message.timestamp.after.max.ms"
            )
        headers.append(header)
        pos += header.size
    return headers


def _check_timestamps(header: BatchHeader, now_ms: int | None, skew_ms: int | None) -> None:
    base, top = header.base_timestamp, header.max_timestamp
    if base < NO_TIMESTAMP or top < NO_TIMESTAMP:
        raise InvalidTimestampError(f"negative timestamp in batch ({base}, {top})")
    if top < base:
        raise InvalidTimestampError(f"maxTimestamp {top} is below baseTimestamp {base}")
    if now_ms is None or skew_ms is None:
        return
    if any(ts != NO_TIMESTAMP and abs(ts - now_ms) > skew_ms for ts in (base, top)):
        raise InvalidTimestampError(
            f"timestamps ({base}, {top}) are more than {skew_ms} ms from now ({now_ms})"
        )


def write_header(buf: WritableBuffer, header: BatchHeader) -> None:
    """Write ``header`` over the first 61 bytes of ``buf``, then its CRC over the rest.

    ``header.crc`` is ignored: the CRC is computed from ``buf`` as it is after
    the header is written, so the records must already be in place.
    """
    _HEADER.pack_into(buf, 0, *header)
    _CRC.pack_into(buf, CRC_AT, compute_crc(buf))


def set_base_offset(buf: WritableBuffer, pos: int, base_offset: int) -> None:
    """Rewrite a batch's baseOffset in place; the CRC stays valid."""
    _BASE_OFFSET.pack_into(buf, pos + BASE_OFFSET_AT, base_offset)


def set_offset_and_epoch(
    buf: WritableBuffer, pos: int, base_offset: int, leader_epoch: int
) -> None:
    """Rewrite baseOffset and partitionLeaderEpoch in place (what a leader does on append)."""
    length = _LENGTH.unpack_from(buf, pos)[1]
    _OFFSET_AND_EPOCH.pack_into(buf, pos, base_offset, length, leader_epoch)


def iter_batches(buf: Buffer, pos: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
    """Headers of the batches laid back to back in ``buf[pos:end]``, each checked.

    Stops with :class:`CorruptRecordError` at the first batch that fails
    :func:`check_batch`; callers that need the position of the failure use
    :func:`scan`.
    """
    stop = len(buf) if end is None else end
    while pos < stop:
        header = check_batch(buf, pos, stop)
        yield header
        pos += header.size


def split_batches(buf: Buffer) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Each batch of ``buf`` (checked, as :func:`iter_batches`) with a view of its bytes."""
    view, pos = memoryview(buf), 0
    for header in iter_batches(buf):
        yield header, view[pos : pos + header.size]
        pos += header.size


class ScanResult(NamedTuple):
    """What :func:`scan` found: the valid prefix and, if any, why it stopped."""

    valid_bytes: int
    """Bytes from the scan's start that hold whole, valid batches."""
    batches: int
    next_offset: int | None
    """Offset after the last valid batch (None when there was none)."""
    max_timestamp: int
    error: str | None
    """Why the scan stopped before the end; None when it reached the end or padding."""


def scan(
    buf: Buffer,
    pos: int = 0,
    end: int | None = None,
    *,
    expected_offset: int | None = None,
) -> ScanResult:
    """Walk batches from ``pos`` and stop at the first invalid or partial one.

    A batch is valid when :func:`check_batch` accepts it and its baseOffset is
    not below the previous batch's next offset (or ``expected_offset`` for the
    first). Zero bytes where the next header would start are preallocated
    space, not damage: the scan stops there with ``error=None``.
    """
    stop = len(buf) if end is None else end
    start = pos
    count = 0
    next_offset = expected_offset
    max_ts = NO_TIMESTAMP
    while pos < stop:
        left = stop - pos
        if (left >= LOG_OVERHEAD and _LENGTH.unpack_from(buf, pos) == (0, 0)) or (
            left < LOG_OVERHEAD and not any(buf[pos:stop])
        ):
            return ScanResult(pos - start, count, next_offset, max_ts, None)
        try:
            header = check_batch(buf, pos, stop)
        except CorruptRecordError as exc:
            return ScanResult(pos - start, count, next_offset, max_ts, str(exc))
        if next_offset is not None and header.base_offset < next_offset:
            return ScanResult(
                pos - start,
                count,
                next_offset,
                max_ts,
                f"baseOffset {header.base_offset} goes back (expected >= {next_offset})",
            )
        count += 1
        next_offset = header.next_offset
        max_ts = max(max_ts, header.max_timestamp)
        pos += header.size
    return ScanResult(pos - start, count, next_offset, max_ts, None)

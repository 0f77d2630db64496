"""The record level of RecordBatch v2: building a batch and decoding its records.

The batch header is specified in :mod:`mq.records.batch`. After it come
``recordsCount`` records, compressed as one block when the codec is not none::

    length          varint   bytes of the record after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - baseTimestamp
    offsetDelta     varint   offset - baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headersCount    varint
    headers         headersCount times: keyLength varint, key (UTF-8),
                    valueLength varint (-1 for null), value

Varints are zigzag-encoded base-128, little-endian groups, as in protobuf: a
varint holds an int32 in at most 5 bytes, a varlong an int64 in at most 10.

:class:`BatchBuilder` is the client-side encoder (one record at a time, into
one bytearray); :func:`build_batch` is a builder run over a list.
:func:`decode_records` is the reader; it trusts nothing past the CRC check and
raises :class:`CorruptRecordError` for any malformed record.
:func:`validate_produced_records` is the broker's check before it stores a
producer's batches: the same rules, no object per record. The functions are
pure; a builder is owned by one task at a time. The per-record loops run in C
(``mq/records/_speedups.c``) when it was built, else their Python versions in
:mod:`mq.records.record_loops`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple, TypeAlias

from mq.errors import CorruptRecordError, InvalidRecordError
from mq.records import batch as fmt
from mq.records import record_loops as loops
from mq.records.compression import CODEC_NONE, CODEC_ZSTD, codec_name, compress, decompress
from mq.records.record_loops import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    MIN_RECORD_SIZE,
    put_headers,
    put_nullable,
    put_varint,
    read_varint,
)

try:  # the C parser, which setup.py builds where a compiler is at hand
    from mq.records import _speedups
except ImportError:  # pragma: no cover - a machine without a C compiler
    _speedups = None  # type: ignore[assignment]

Buffer: TypeAlias = fmt.Buffer
Header: TypeAlias = tuple[str, bytes | None]
RecordInput: TypeAlias = tuple[bytes | None, bytes | None, Sequence[Header], int]
"""What :func:`build_batch` takes per record: key, value, headers, timestamp (ms)."""

DEFAULT_MAX_DECOMPRESSED: Final = 64 * 1024 * 1024
"""Default bound on a batch's decompressed records. Batches are bounded by
``max.message.bytes`` (1 MiB by default in Kafka) on the way in; 64 MiB leaves
room for very compressible data while a decompression bomb costs at most that."""


class Record(NamedTuple):
    """One decoded record, offsets and timestamps made absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


def encode_varint(value: int) -> bytes:
    """Zigzag varint encoding of an int32."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    out = bytearray()
    put_varint(out, value)
    return bytes(out)


def encode_varlong(value: int) -> bytes:
    """Zigzag varint encoding of an int64."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    out = bytearray()
    put_varint(out, value)
    return bytes(out)


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode the int32 varint at ``pos``; returns ``(value, next position)``."""
    try:
        return read_varint(buf, pos, 5)
    except IndexError:
        raise CorruptRecordError("varint is truncated") from None


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode the int64 varlong at ``pos``; returns ``(value, next position)``."""
    try:
        return read_varint(buf, pos, 10)
    except IndexError:
        raise CorruptRecordError("varlong is truncated") from None


USE_C: Final = _speedups is not None and not os.environ.get("MQ_PURE_PYTHON")
"""Whether the record loops run in C: when built, unless the environment sets ``MQ_PURE_PYTHON``."""


_append_record = loops.append_record
_append_values = loops.append_values
append_record = _speedups.append_record if USE_C else _append_record
"""The record encoder :class:`BatchBuilder` runs: C when built, else Python."""
append_values = _speedups.append_values if USE_C else _append_values
"""The bulk encoder of :meth:`BatchBuilder.append_values`: C when built, else Python."""


class BatchBuilder:
    """Accumulates records into one RecordBatch v2, encoding each on append.

    Records are encoded straight into one bytearray behind space for the
    header; :meth:`build` compresses that region if asked, writes the header
    and the CRC. Offset deltas count from 0; the first record's timestamp is
    the baseTimestamp. Not thread-safe: one producer task owns a builder.
    """

    def __init__(
        self,
        *,
        codec: int = CODEC_NONE,
        base_offset: int = 0,
        producer_id: int = fmt.NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        leader_epoch: int = -1,
        timestamp_type: int = 0,
    ) -> None:
        codec_name(codec)  # raises UnsupportedCompressionError for an unknown codec
        if timestamp_type not in (0, 1):
            raise ValueError(
                f"timestamp_type is 0 (create time) or 1 (log append time), not {timestamp_type}"
            )
        self._codec = codec
        self._attributes = (
            codec
            | (fmt.TIMESTAMP_TYPE_BIT if timestamp_type else 0)
            | (fmt.TRANSACTIONAL_BIT if transactional else 0)
        )
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._leader_epoch = leader_epoch
        self._buf = bytearray(fmt.HEADER_SIZE)
        self._count = 0
        self._base_timestamp = 0
        self._max_timestamp = 0
        self._built: bytes | None = None

    def __len__(self) -> int:
        """Records appended so far."""
        return self._count

    def size_in_bytes(self) -> int:
        """Bytes of the batch so far, header included, before compression.

        Exact for codec none; for a compressed batch an estimate that
        compression usually beats, which suits an accumulator filling batches
        up to a size limit. After :meth:`build`, the size of the built batch.
        """
        return len(self._built) if self._built is not None else len(self._buf)

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp_ms: int,
        *,
        max_batch_bytes: int | None = None,
    ) -> bool:
        """Encode one record at the next offset delta; return whether it was added.

        With ``max_batch_bytes`` a record that would take :meth:`size_in_bytes`
        past the limit is not added (False), unless the batch is empty: the
        first record always goes in, so an oversized record still gets a batch
        of its own for the broker to accept or refuse.
        """
        if self._built is not None:
            raise RuntimeError("the batch is already built")
        count = self._count
        if count == 0:
            if not INT64_MIN <= timestamp_ms <= INT64_MAX:
                raise ValueError(f"timestamp {timestamp_ms} does not fit an int64")
            self._base_timestamp = self._max_timestamp = timestamp_ms
        ts_delta = timestamp_ms - self._base_timestamp
        if not INT64_MIN <= ts_delta <= INT64_MAX:
            raise ValueError(f"timestamp {timestamp_ms} is too far from the batch's first")

        limit = max_batch_bytes if max_batch_bytes is not None and count else -1
        if not append_record(self._buf, ts_delta, count, key, value, headers, limit):
            return False
        self._count = count + 1
        if timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        return True

    def append_values(
        self,
        values: Sequence[bytes | None],
        start: int,
        timestamp_ms: int,
        *,
        max_batch_bytes: int,
    ) -> int:
        """Encode ``values[start:]`` as keyless, headerless records of one timestamp.

        As many as fit under ``max_batch_bytes`` (the first always, if the
        batch is empty), in one pass (:func:`mq.records.bulk.encode_values`);
        returns how many were added.
        """
        if self._built is not None:
            raise RuntimeError("the batch is already built")
        count = self._count
        if count == 0:
            if not INT64_MIN <= timestamp_ms <= INT64_MAX:
                raise ValueError(f"timestamp {timestamp_ms} does not fit an int64")
            self._base_timestamp = self._max_timestamp = timestamp_ms
        ts_delta = timestamp_ms - self._base_timestamp
        if not INT64_MIN <= ts_delta <= INT64_MAX:
            raise ValueError(f"timestamp {timestamp_ms} is too far from the batch's first")
        added = append_values(self._buf, values, start, count, ts_delta, max_batch_bytes)
        self._count = count + added
        if added and timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        return added

    def build(self) -> bytes:
        """Compress the records if the codec says so, write the header and the CRC.

        The builder is closed afterwards; calling this again returns the same
        bytes. A batch needs at least one record.
        """
        if self._built is not None:
            return self._built
        if self._count == 0:
            raise ValueError("a batch needs at least one record")
        buf = self._buf
        if self._codec != CODEC_NONE:
            payload = compress(self._codec, memoryview(buf)[fmt.HEADER_SIZE :])
            del buf[fmt.HEADER_SIZE :]
            buf += payload
        fmt.write_header(
            buf,
            fmt.BatchHeader(
                self._base_offset,
                len(buf) - fmt.LOG_OVERHEAD,
                self._leader_epoch,
                fmt.MAGIC,
                0,
                self._attributes,
                self._count - 1,
                self._base_timestamp,
                self._max_timestamp,
                self._producer_id,
                self._producer_epoch,
                self._base_sequence,
                self._count,
            ),
        )
        self._built = bytes(buf)
        self._buf = bytearray()
        return self._built


def build_batch(
    records: Iterable[RecordInput],
    *,
    codec: int = CODEC_NONE,
    base_offset: int = 0,
    producer_id: int = fmt.NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    leader_epoch: int = -1,
    timestamp_type: int = 0,
) -> bytes:
    """Build one complete batch from ``(key, value, headers, timestamp_ms)`` tuples.

    ``leader_epoch`` defaults to -1 as Kafka's Java producer writes it (the
    broker overwrites it on append, outside the CRC).
    """
    builder = BatchBuilder(
        codec=codec,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        leader_epoch=leader_epoch,
        timestamp_type=timestamp_type,
    )
    append = builder.append
    for key, value, headers, timestamp_ms in records:
        append(key, value, headers, timestamp_ms)
    return builder.build()


def rebuild_batch(
    header: fmt.BatchHeader,
    records: Sequence[Record],
    *,
    attributes: int,
    base_timestamp: int,
) -> bytes:
    """The batch ``header`` describes, holding only ``records`` (the log cleaner's rewrite).

    baseOffset, lastOffsetDelta, maxTimestamp, the leader epoch and the
    producer fields stay as they were, and each record keeps its offset: a
    compacted batch covers the same offsets as the original, so nothing
    that tracks offsets or sequences moves. Timestamps are re-encoded as
    deltas from ``base_timestamp``. Not on any hot path.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    body = bytearray()
    put = put_varint
    for offset, timestamp, key, value, headers in records:
        record = bytearray(1)  # attributes: unused
        put(record, timestamp - base_timestamp)
        put(record, offset - header.base_offset)
        put_nullable(record, key)
        put_nullable(record, value)
        put(record, len(headers))
        put_headers(record, headers)
        put(body, len(record))
        body += record
    codec = attributes & fmt.CODEC_MASK
    payload = body if codec == CODEC_NONE else compress(codec, body)
    out = bytearray(fmt.HEADER_SIZE) + payload
    fmt.write_header(
        out,
        header._replace(
            batch_length=len(out) - fmt.LOG_OVERHEAD,
            attributes=attributes,
            base_timestamp=base_timestamp,
            records_count=len(records),
        ),
    )
    return bytes(out)


def decode_records(
    batch: Buffer,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    shape: tuple[type[tuple[Any, ...]], str, int] | None = None,
) -> list[Record]:
    """Decode the records of exactly one batch (``batch`` holds it and nothing else).

    Checks the header with :func:`mq.records.batch.check_batch` (length, magic,
    CRC), decompresses with the ``max_decompressed`` bound, then parses every
    record. Raises :class:`CorruptRecordError` for a truncated or overlong
    varint, a length past its record, a negative length other than -1, a
    header key that is not UTF-8, an offset delta out of order or past
    lastOffsetDelta, fewer or more records than recordsCount, or bytes left
    over. A record's timestamp is the batch's maxTimestamp when the batch says
    log-append time, as in Kafka.

    ``shape`` (a tuple type, a topic and a partition) makes each record that
    type's ``(topic, partition, offset, timestamp, key, value, headers,
    timestamp_type)`` instead of a :class:`Record`: a consumer's records come
    out of the parser whole, with no second object per record.
    """
    header = fmt.check_batch(batch, 0, len(batch))
    if header.size != len(batch):
        raise CorruptRecordError(f"{len(batch) - header.size} bytes follow the batch")
    if header.attributes & fmt.ENCRYPTED_BIT:
        raise CorruptRecordError(
            f"the batch at offset {header.base_offset} is encrypted at rest: it is decoded "
            "only once a broker holding its key has opened it"
        )
    codec = header.codec
    data: bytes
    if codec == CODEC_NONE:
        data = batch if isinstance(batch, bytes) else bytes(batch)
        pos = fmt.RECORDS_AT
    elif codec <= CODEC_ZSTD:
        data = decompress(codec, memoryview(batch)[fmt.RECORDS_AT :], max_decompressed)
        pos = 0
    else:
        raise CorruptRecordError(f"batch attributes name codec {codec}, which does not exist")
    count = header.records_count
    if count > (len(data) - pos) // MIN_RECORD_SIZE:
        raise CorruptRecordError(f"{len(data) - pos} bytes cannot hold {count} records")
    try:
        records, pos = parse_records(data, pos, count, header, shape)
    except IndexError:
        raise CorruptRecordError("a record runs past the end of the batch") from None
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"a header key is not UTF-8: {exc}") from None
    if pos != len(data):
        raise CorruptRecordError(f"{len(data) - pos} bytes follow the last record")
    return records


def _parse_records(
    data: bytes,
    pos: int,
    count: int,
    header: fmt.BatchHeader,
    shape: tuple[type[tuple[Any, ...]], str, int] | None = None,
) -> tuple[list[Any], int]:
    """The record parser in Python (:func:`mq.records.record_loops.parse_records`)."""
    return loops.parse_records(data, pos, count, header, shape, Record)


def _parse_records_c(
    data: bytes,
    pos: int,
    count: int,
    header: fmt.BatchHeader,
    shape: tuple[type[tuple[Any, ...]], str, int] | None = None,
) -> tuple[list[Any], int]:
    """:func:`_parse_records` in C (``mq/records/_speedups.c``): the same checks and errors."""
    append_time = header.max_timestamp if header.attributes & fmt.TIMESTAMP_TYPE_BIT else None
    kind, topic, partition = shape if shape is not None else (Record, None, 0)
    return _speedups.parse_records(
        data,
        pos,
        count,
        header.base_offset,
        header.base_timestamp,
        append_time,
        header.last_offset_delta,
        kind,
        topic,
        partition,
        0 if append_time is None else 1,
        CorruptRecordError,
    )


parse_records = _parse_records_c if USE_C else _parse_records
"""The record parser :func:`decode_records` runs: C when built, else Python."""

validate_records = _speedups.validate_records if USE_C else loops.validate_records
"""The records check of :func:`validate_produced_records`: C when built, else Python."""


def validate_produced_records(
    data: bytes | bytearray | memoryview,
    headers: Sequence[fmt.BatchHeader],
    *,
    max_decompressed: int,
) -> None:
    """Check the records of a producer's batches (``headers``, laid back to back in ``data``).

    The broker's check before it stores anything, on top of the header checks
    of :func:`mq.records.batch.validate_produced` (which ``headers`` passed):
    :func:`validate_records` over each batch's records, decompressed first
    (never past ``max_decompressed`` bytes) when the batch is compressed. One C
    pass over the bytes of an uncompressed batch, no object per record.

    Raises :class:`InvalidRecordError` (INVALID_RECORD, not retriable) naming
    the batch, the record and the field: the CRC held, so the producer sent
    these bytes and sending them again cannot succeed. Thread-safe (pure).
    """
    pos = 0
    check = validate_records
    for index, header in enumerate(headers):  # fields, not properties: the produce path
        size = header.batch_length + fmt.LOG_OVERHEAD
        try:
            if header.attributes & fmt.CODEC_MASK == CODEC_NONE:
                check(
                    data, pos + fmt.RECORDS_AT, pos + size, header.records_count, InvalidRecordError
                )
            else:
                records = decompress(
                    header.codec,
                    memoryview(data)[pos + fmt.RECORDS_AT : pos + size],
                    max_decompressed,
                )
                check(records, 0, len(records), header.records_count, InvalidRecordError)
        except (InvalidRecordError, CorruptRecordError) as exc:
            raise InvalidRecordError(
                f"batch {index} (byte {pos} of the request, {codec_name(header.codec)}): {exc}"
            ) from None
        pos += size

"""The record format's per-record loops in pure Python, and the varint pieces they use.

:mod:`mq.records.records` runs the C versions of the three loops
(``mq/records/_speedups.c``) when they were built, and these otherwise (or
with ``MQ_PURE_PYTHON=1``); the two are tested against each other byte for
byte and error message for error message (``tests/unit/test_speedups.py``).
The record layout is in :mod:`mq.records.records`.

* :func:`parse_records`: the consumer's decoder, one record at a time.
* :func:`append_record`: one record at the end of a batch being built.
* :func:`append_values`: many keyless, headerless records
  (:func:`mq.records.bulk.encode_values`).
* :func:`record_starts`: where each record begins, for a columnar decoder.
* :func:`validate_records`: the broker's check of a produced batch's records,
  without an object per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TypeAlias

from mq.errors import CorruptRecordError
from mq.records import batch as fmt
from mq.records.bulk import encode_values

Buffer: TypeAlias = fmt.Buffer
Header: TypeAlias = tuple[str, bytes | None]

MIN_RECORD_SIZE: Final = 7
"""The smallest encoded record: length, attributes, two deltas, null key, null
value and zero headers, one byte each. Bounds a claimed recordsCount."""

_ZIGZAG: Final = tuple((byte >> 1) ^ -(byte & 1) for byte in range(0x80))
"""The value of each one-byte varint, looked up inline by the record parser."""
_ZIGZAG2: Final = tuple((raw >> 1) ^ -(raw & 1) for raw in range(0x4000))
"""The value of each two-byte varint by its 14 payload bits (low byte's 7, then the
high byte's): record lengths, value sizes and timestamp deltas of most records."""
INT32_MIN: Final = -(1 << 31)
INT32_MAX: Final = (1 << 31) - 1
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1


def put_varint(out: bytearray, value: int) -> None:
    """Append the zigzag varint of ``value`` (range checked by the caller)."""
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def put_nullable(out: bytearray, field: bytes | None) -> None:
    """A length-prefixed field; -1 (zigzag 1) for null."""
    if field is None:
        out.append(1)
    else:
        put_varint(out, len(field))
        out += field


def put_headers(out: bytearray, headers: Sequence[Header]) -> None:
    """Each header as a length-prefixed UTF-8 key and a nullable value (the count not included)."""
    for header_key, header_value in headers:
        if not isinstance(header_key, str):
            raise TypeError(f"a header key is a str, not {type(header_key).__name__}")
        encoded = header_key.encode()
        put_varint(out, len(encoded))
        out += encoded
        put_nullable(out, header_value)


def read_varint(buf: Buffer, pos: int, max_bytes: int) -> tuple[int, int]:
    """Decode a zigzag varint of at most ``max_bytes`` (5: int32, 10: int64).

    Rejects encodings longer than ``max_bytes`` and values that do not fit the
    type, as Kafka's reader does. One and two bytes, nearly every length and
    delta, take the short paths. Truncation surfaces as :class:`IndexError` so
    that the record parser can catch it once.
    """
    byte = buf[pos]
    if byte < 0x80:
        return _ZIGZAG[byte], pos + 1
    raw = byte & 0x7F
    byte = buf[pos + 1]
    pos += 2
    if byte < 0x80:
        raw |= byte << 7
        return (raw >> 1) ^ -(raw & 1), pos
    raw |= (byte & 0x7F) << 7
    shift = 14
    for _ in range(max_bytes - 2):
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> (32 if max_bytes == 5 else 64):
                raise CorruptRecordError(f"varint {raw:#x} is out of range")
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise CorruptRecordError(f"varint is longer than {max_bytes} bytes")


def append_record(
    buf: bytearray,
    ts_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
    limit: int,
) -> bool:
    """Encode one record at the end of ``buf``; with ``limit >= 0``, one that would take
    ``buf`` past it is left out (False). ``mq/records/_speedups.c`` has the C version."""
    start = len(buf)
    put = put_varint
    try:
        # Two bytes for the length prefix (enough below 8 KiB), then the
        # attributes byte, 0; the prefix is filled in once the length is known.
        buf += b"\x00\x00\x00"
        put(buf, ts_delta)
        put(buf, offset_delta)
        if key is None:
            buf.append(1)  # zigzag(-1): null
        else:
            put(buf, len(key))
            buf += key
        if value is None:
            buf.append(1)
        else:
            put(buf, len(value))
            buf += value
        put(buf, len(headers))
        if headers:  # headerless records, the common case, skip the call
            put_headers(buf, headers)
        length = len(buf) - start - 2
        if length < 0x40:
            buf[start] = length << 1
            del buf[start + 1]
        elif length < 0x2000:
            buf[start] = ((length << 1) & 0x7F) | 0x80
            buf[start + 1] = length >> 6
        else:
            if length > INT32_MAX:
                raise ValueError(f"{length} does not fit a varint (int32)")
            prefix = bytearray()
            put_varint(prefix, length)
            buf[start : start + 2] = prefix
    except BaseException:
        del buf[start:]  # no half-written record stays behind
        raise
    if 0 <= limit < len(buf):
        del buf[start:]
        return False
    return True


def append_values(
    buf: bytearray,
    values: Sequence[bytes | None],
    start: int,
    first_delta: int,
    ts_delta: int,
    limit: int,
) -> int:
    """Keyless, headerless records for ``values[start:]`` at the end of ``buf``, as many
    as keep it within ``limit`` bytes (:func:`mq.records.bulk.encode_values`); how many."""
    data, added = encode_values(values, start, first_delta, ts_delta, limit - len(buf))
    buf += data
    return added


def parse_records(
    data: bytes,
    pos: int,
    count: int,
    header: fmt.BatchHeader,
    shape: tuple[type[tuple[Any, ...]], str, int] | None,
    plain: type[tuple[Any, ...]],
) -> tuple[list[Any], int]:
    """Parse ``count`` records from ``data[pos:]``: the hot loop of every consumer.

    Each record is a ``plain`` of ``(offset, timestamp, key, value, headers)``,
    or with ``shape`` (a tuple type, a topic, a partition) that type's
    ``(topic, partition, offset, timestamp, key, value, headers, timestamp_type)``.

    Each varint takes an inline path when it is one byte (``_ZIGZAG``) or two
    (``_ZIGZAG2``), and :func:`read_varint` otherwise. Field
    overruns are not checked one by one: the slices stop at the end of
    ``data``, positions keep counting, and the record's end must then match its
    stated length. Truncation raises :class:`IndexError` for the caller.
    """
    records: list[Any] = []
    add = records.append
    read = read_varint
    zigzag = _ZIGZAG
    zigzag2 = _ZIGZAG2
    new_record: Any = tuple.__new__  # kind(...) through its Python __new__ is 2x slower
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.attributes & fmt.TIMESTAMP_TYPE_BIT else None
    timestamp_type = 0 if append_time is None else 1
    kind, topic, partition = shape if shape is not None else (plain, "", 0)
    last_delta = header.last_offset_delta
    previous_delta = -1
    end = len(data)
    for _ in range(count):
        # Each varint inline: one byte, two bytes (a table), else the general reader.
        # Statements, not expressions: no tuple is built on the short paths.
        if (b := data[pos]) < 0x80:
            length = zigzag[b]
            pos += 1
        elif (c := data[pos + 1]) < 0x80:
            length = zigzag2[(b & 0x7F) | (c << 7)]
            pos += 2
        else:
            length, pos = read(data, pos, 5)
        record_end = pos + length
        if length < MIN_RECORD_SIZE - 1 or record_end > end:
            raise CorruptRecordError(f"record length {length} is impossible here")
        pos += 1  # attributes: unused
        if (b := data[pos]) < 0x80:
            ts_delta = zigzag[b]
            pos += 1
        elif (c := data[pos + 1]) < 0x80:
            ts_delta = zigzag2[(b & 0x7F) | (c << 7)]
            pos += 2
        else:
            ts_delta, pos = read(data, pos, 10)
        if (b := data[pos]) < 0x80:
            offset_delta = zigzag[b]
            pos += 1
        elif (c := data[pos + 1]) < 0x80:
            offset_delta = zigzag2[(b & 0x7F) | (c << 7)]
            pos += 2
        else:
            offset_delta, pos = read(data, pos, 5)
        if not previous_delta < offset_delta <= last_delta:
            raise CorruptRecordError(f"offset delta {offset_delta} after {previous_delta}")
        previous_delta = offset_delta
        if (b := data[pos]) == 1:  # -1: a null key, the usual case
            key = None
            pos += 1
        else:
            if b < 0x80:
                size = zigzag[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                size = zigzag2[(b & 0x7F) | (c << 7)]
                pos += 2
            else:
                size, pos = read(data, pos, 5)
            key = data[pos : pos + size] if size >= 0 else _null(size)
            pos += size if size > 0 else 0
        if (b := data[pos]) < 0x80:
            size = zigzag[b]
            pos += 1
        elif (c := data[pos + 1]) < 0x80:
            size = zigzag2[(b & 0x7F) | (c << 7)]
            pos += 2
        else:
            size, pos = read(data, pos, 5)
        value = data[pos : pos + size] if size >= 0 else _null(size)
        pos += size if size > 0 else 0
        if (b := data[pos]) == 0:  # no headers, the usual case
            pos += 1
            size = 0
        else:
            size, pos = read(data, pos, 5)
        headers: Any = ()
        if size:
            headers = []
            if not 0 < size <= (record_end - pos) // 2:
                raise CorruptRecordError(f"record claims {size} headers")
            for _ in range(size):
                key_size, pos = read(data, pos, 5)
                if key_size < 0:
                    raise CorruptRecordError(f"header key length {key_size}")
                header_key = data[pos : pos + key_size].decode()
                pos += key_size
                value_size, pos = read(data, pos, 5)
                header_value = (
                    data[pos : pos + value_size] if value_size >= 0 else _null(value_size)
                )
                pos += value_size if value_size > 0 else 0
                headers.append((header_key, header_value))
            headers = tuple(headers)
        if pos != record_end:
            raise CorruptRecordError(f"record fields end {pos - record_end:+d} bytes off")
        timestamp = base_timestamp + ts_delta if append_time is None else append_time
        offset = base_offset + offset_delta
        if shape is None:
            add(new_record(plain, (offset, timestamp, key, value, headers)))
        else:
            fields = (topic, partition, offset, timestamp, key, value, headers, timestamp_type)
            add(new_record(kind, fields))
    return records, pos


def record_starts(
    data: bytes, starts: Sequence[int], counts: Sequence[int], end: int | None = None
) -> list[int]:
    """Where each record begins (its length varint) in ``data``, for record sections at
    ``starts`` holding ``counts`` records: the one sequential step of a columnar
    decoder (each record's length says where the next begins).

    Lengths are not checked here (the caller decodes them again, all at once,
    and compares each record's end with the next one's start); a section that
    does not end exactly where the next starts (or ``end``, default ``data``'s end) raises
    :class:`CorruptRecordError`, a position past the end IndexError.
    """
    out: list[int] = []
    add = out.append
    read = read_varint
    zigzag, zigzag2 = _ZIGZAG, _ZIGZAG2
    ends = [*starts[1:], len(data) if end is None else end]
    for pos, count, stop in zip(starts, counts, ends, strict=True):
        for _ in range(count):
            add(pos)
            if (b := data[pos]) < 0x80:
                pos += zigzag[b] + 1
            elif (c := data[pos + 1]) < 0x80:
                pos += zigzag2[(b & 0x7F) | (c << 7)] + 2
            else:
                length, pos = read(data, pos, 5)
                pos += length
        if pos != stop:
            raise CorruptRecordError(f"records end {pos - stop:+d} bytes off their section")
    return out


def _null(size: int) -> bytes | None:
    """The value a negative length stands for: null for -1, corruption otherwise."""
    if size != -1:
        raise CorruptRecordError(f"negative length {size}")
    return None


def validate_records(
    data: Buffer, pos: int, end: int, count: int, invalid: type[Exception]
) -> None:
    """Check that ``data[pos:end]`` holds exactly ``count`` well-formed records.

    What the broker checks before it stores a produced batch (the records of
    an uncompressed batch, or a compressed batch's records once decompressed):
    each record's length is at least 6 and within the records, its offset
    delta is its index (0..count-1, as Kafka requires of v2), every varint is
    at most 5 bytes (10 for the timestamp delta) and in range, every key,
    value and header length is -1 (null; never for a header key) or within
    the record, header keys are UTF-8, each record's fields end exactly at its
    length and the last record exactly at ``end``. Raises ``invalid`` naming the
    record and the field. Nothing is built per record; ``mq/records/_speedups.c``
    has the C version (same verdicts, same messages), which the broker runs.
    """
    if pos < 0 or end > len(data) or pos > end or count < 0:
        raise ValueError("pos, end or count out of range")
    if count > (end - pos) // MIN_RECORD_SIZE:
        raise invalid(f"{end - pos} bytes cannot hold {count} records")
    for i in range(count):
        length, pos = _check_varint(data, pos, end, 5, invalid, i, "length")
        if length < MIN_RECORD_SIZE - 1:
            raise invalid(f"record {i}: length {length} is below the minimum of 6")
        if length > end - pos:
            raise invalid(
                f"record {i}: length {length} runs past the records ({end - pos} bytes left)"
            )
        record_end = pos + length
        pos += 1  # attributes: unused
        _, pos = _check_varint(data, pos, record_end, 10, invalid, i, "timestamp delta")
        delta, pos = _check_varint(data, pos, record_end, 5, invalid, i, "offset delta")
        if delta != i:
            raise invalid(f"record {i}: offset delta {delta}, expected {i}")
        for what in ("key", "value"):
            size, pos = _check_varint(data, pos, record_end, 5, invalid, i, f"{what} length")
            pos = _check_field(size, pos, record_end, invalid, i, what)
        headers, pos = _check_varint(data, pos, record_end, 5, invalid, i, "header count")
        if not 0 <= headers <= (record_end - pos) // 2:
            raise invalid(
                f"record {i}: header count {headers} does not fit the record "
                f"({record_end - pos} bytes left)"
            )
        for h in range(headers):
            field = f"header {h} key"
            size, pos = _check_varint(data, pos, record_end, 5, invalid, i, f"{field} length")
            if size < 0:
                raise invalid(f"record {i}: {field} length {size} is negative")
            key_at = pos
            pos = _check_field(size, pos, record_end, invalid, i, field)
            try:
                bytes(data[key_at:pos]).decode()
            except UnicodeDecodeError:
                raise invalid(f"record {i}: {field} is not UTF-8") from None
            field = f"header {h} value"
            size, pos = _check_varint(data, pos, record_end, 5, invalid, i, f"{field} length")
            pos = _check_field(size, pos, record_end, invalid, i, field)
        if pos != record_end:
            raise invalid(f"record {i}: {record_end - pos} bytes follow its last field")
    if pos != end:
        raise invalid(f"{end - pos} bytes follow the last record")


def _check_varint(
    data: Buffer,
    pos: int,
    limit: int,
    max_bytes: int,
    invalid: type[Exception],
    index: int,
    field: str,
) -> tuple[int, int]:
    """The varint at ``pos`` read no further than ``limit``, or ``invalid`` naming the field."""
    raw = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= limit:
            raise invalid(f"record {index}: {field} varint is truncated")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> (32 if max_bytes == 5 else 64):
                raise invalid(f"record {index}: {field} varint is out of range")
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise invalid(f"record {index}: {field} varint is longer than {max_bytes} bytes")


def _check_field(
    size: int, pos: int, record_end: int, invalid: type[Exception], index: int, what: str
) -> int:
    """Where a nullable field of ``size`` bytes at ``pos`` ends, or ``invalid``."""
    if size < -1:
        raise invalid(f"record {index}: {what} length {size} is negative")
    if size > record_end - pos:
        raise invalid(
            f"record {index}: {what} length {size} runs past the record "
            f"({record_end - pos} bytes left)"
        )
    return pos + size if size > 0 else pos

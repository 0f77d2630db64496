"""Record batches straight to Arrow columns, with as little Python per record as can be.

A Spark task reads hundreds of thousands of records; decoding each into
Python objects (as a consumer does) and then building Arrow arrays from
them costs several µs per record, more than the rest of Spark's read. Here a
fetched chunk of batches becomes one Arrow record batch in three steps:

1. per batch, in Python: the header, its CRC (``crc32c``, in C), the codec
   (a compressed records section is decompressed), and the records section
   copied once into one buffer for the whole chunk;
2. per record, in Python, the only sequential part: the record's length
   varint, which says where the next one starts (a table lookup for one- and
   two-byte varints);
3. everything else with numpy, for all records at once: the field varints,
   offsets and timestamps, and the key and value bytes gathered into Arrow
   binary columns.

Each record's fields are checked to end exactly at its stated length, offset
deltas to increase up to lastOffsetDelta and lengths to be -1 or more. A
chunk that fails a check, or that has record headers (rare, and variable in
shape), is decoded by the client's exact record parser instead, which raises
the precise :class:`~mq.errors.CorruptRecordError`.
"""

from __future__ import annotations

# isort: off
import spark_connector._needs_extra  # noqa: F401  (first: a missing extra is one line)

# isort: on
from typing import Final

import numpy as np
import pyarrow as pa

from mq.client.types import ConsumerRecord
from mq.errors import CorruptRecordError
from mq.records.batch import (
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    check_batch,
)
from mq.records.compression import CODEC_NONE, decompress
from mq.records.record_loops import MIN_RECORD_SIZE, record_starts
from mq.records.records import DEFAULT_MAX_DECOMPRESSED, decode_records
from spark_connector.schema import ARROW_SCHEMA, HEADERS_TYPE, to_arrow

_PAD: Final = bytes(16)
"""Zero bytes after the buffer, so that a varint read past the last record stops."""
_NO_HEADERS: Final = pa.array([], HEADERS_TYPE.value_type)


class _Sections:
    """The records sections of a chunk's data batches, and per-batch facts."""

    def __init__(self) -> None:
        self.pieces: list[bytes | memoryview] = []
        self.size = 0
        self.starts: list[int] = []
        self.counts: list[int] = []
        self.base_offsets: list[int] = []
        self.base_timestamps: list[int] = []
        self.max_timestamps: list[int] = []
        self.last_deltas: list[int] = []
        self.log_append: list[bool] = []


def to_arrow_columns(
    data: bytes, topic: str, partition: int, start: int, end: int
) -> pa.RecordBatch | None:
    """The records ``start <= offset < end`` of ``data`` (whole batches) as one Arrow batch."""
    sections = _sections(data, start)
    if not sections.counts:
        return None
    try:
        batch = _decode(sections, topic, partition)
    except (_Fallback, IndexError, ValueError, CorruptRecordError):
        batch = None
    if batch is None:
        return _exact(data, topic, partition, start, end)
    offsets = batch.column(4).to_numpy()
    lo, hi = np.searchsorted(offsets, [start, end])
    if hi <= lo:
        return None
    return batch.slice(int(lo), int(hi - lo)) if (lo, hi) != (0, len(offsets)) else batch


class _Fallback(Exception):
    """The fast path does not apply to this chunk (headers, or something to report)."""


def _sections(data: bytes, start: int) -> _Sections:
    out = _Sections()
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        header = check_batch(data, pos, len(data))
        size = header.batch_length + LOG_OVERHEAD
        last = header.base_offset + header.last_offset_delta
        if last >= start and not header.attributes & CONTROL_BIT and header.records_count:
            codec = header.attributes & 0x07
            if codec == CODEC_NONE:
                section: bytes | memoryview = view[pos + HEADER_SIZE : pos + size]
            else:
                section = decompress(
                    codec, view[pos + HEADER_SIZE : pos + size], DEFAULT_MAX_DECOMPRESSED
                )
            out.pieces.append(section)
            out.starts.append(out.size)
            out.size += len(section)
            out.counts.append(header.records_count)
            out.base_offsets.append(header.base_offset)
            out.base_timestamps.append(header.base_timestamp)
            out.max_timestamps.append(header.max_timestamp)
            out.last_deltas.append(header.last_offset_delta)
            out.log_append.append(bool(header.attributes & TIMESTAMP_TYPE_BIT))
        pos += size
    return out


def _decode(s: _Sections, topic: str, partition: int) -> pa.RecordBatch:
    padded = b"".join([*s.pieces, _PAD])  # one copy of the chunk, and the pad with it
    arr = np.frombuffer(padded, np.uint8)
    starts = _record_starts(arr, padded, s.starts, s.counts, s.size)
    length, body = _varints(arr, starts)
    if (length < MIN_RECORD_SIZE - 1).any():
        raise _Fallback
    ts_delta, p = _varints(arr, body + 1)  # after the attributes byte
    offset_delta, p = _varints(arr, p)
    key_size, p = _varints(arr, p)
    key_at = p
    p = p + np.maximum(key_size, 0)
    value_size, p = _varints(arr, p)
    value_at = p
    p = p + np.maximum(value_size, 0)
    header_count, p = _varints(arr, p)
    if header_count.any() or not np.array_equal(p, body + length):
        raise _Fallback
    if (key_size < -1).any() or (value_size < -1).any():
        raise _Fallback
    counts = np.asarray(s.counts, np.int64)
    first = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    gaps = np.diff(offset_delta)
    gaps[first[1:] - 1] = 1  # a batch boundary: each batch restarts its deltas
    if (
        (gaps <= 0).any()
        or (offset_delta[first] < 0).any()
        or (offset_delta > np.repeat(np.asarray(s.last_deltas, np.int64), counts)).any()
    ):
        raise _Fallback
    log_append = np.repeat(np.asarray(s.log_append, np.bool_), counts)
    timestamps = np.where(
        log_append,
        np.repeat(np.asarray(s.max_timestamps, np.int64), counts),
        np.repeat(np.asarray(s.base_timestamps, np.int64), counts) + ts_delta,
    )
    n = len(body)
    return pa.RecordBatch.from_arrays(
        [
            _binary(arr, key_at, key_size),
            _binary(arr, value_at, value_size),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(np.repeat(np.asarray(s.base_offsets, np.int64), counts) + offset_delta),
            pa.array(timestamps * 1000, pa.timestamp("us", tz="UTC")),
            pa.array(log_append.astype(np.int32)),
            pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), _NO_HEADERS),
        ],
        schema=ARROW_SCHEMA,
    )


def _record_starts(
    arr: np.ndarray, buf: bytes, sections: list[int], counts: list[int], end: int
) -> np.ndarray:
    """Where each record begins: the one sequential step, each length giving the next start.

    The batches are independent, so they are walked side by side: step ``k``
    reads the length of the k-th record of every batch at once, with numpy.
    That costs a few numpy calls per step, cheaper than a Python step per
    record when there are many batches of few records (the usual fetch); for
    a few big batches the Python walk (:func:`~mq.records.record_loops.record_starts`)
    is cheaper and is used instead.
    """
    total, longest = sum(counts), max(counts)
    if longest * _STEP_COST > total * _RECORD_COST:
        return np.asarray(record_starts(buf, sections, counts, end), np.int64)
    order = np.argsort(-np.asarray(counts, np.int64), kind="stable")
    count = np.asarray(counts, np.int64)[order]
    pos = np.asarray(sections, np.int64)[order]
    first = np.zeros(len(counts), np.int64)  # where each batch's records go in the output
    np.cumsum(np.asarray(counts, np.int64)[:-1], out=first[1:])
    first = first[order]
    live = np.searchsorted(-count, -np.arange(longest), side="left")  # batches with > k records
    out = np.empty(total, np.int64)
    for k in range(longest):
        m = live[k]
        here = pos[:m]
        out[first[:m] + k] = here
        length, body = _varints(arr, here)
        pos[:m] = body + length
    ends = np.asarray([*sections[1:], end], np.int64)[order]
    if not np.array_equal(pos, ends):
        raise _Fallback
    return out


_STEP_COST: Final = 80.0
"""A step of the side-by-side walk (about 20 µs of numpy calls), in units of..."""
_RECORD_COST: Final = 1.0
"""...a step of the Python walk (one record, about 0.25 µs): measured here with
8 MB chunks of 125, 500 and 2,000 records per batch (side by side wins below
about 80 batches per step's worth of records)."""


def _varints(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints at ``pos`` (at most 10 bytes each), and the positions after them.

    One- and two-byte varints (nearly all lengths and deltas) take a short
    path of a few whole-array operations; longer ones the general loop.
    """
    first = arr[pos]
    more = first >= 0x80
    if not more.any():
        raw = first.astype(np.int64)
        return (raw >> 1) ^ -(raw & 1), pos + 1
    second = arr[pos + 1]
    if not (more & (second >= 0x80)).any():
        raw = np.where(more, (first & 0x7F) | (second.astype(np.int64) << 7), first)
        return (raw >> 1) ^ -(raw & 1), pos + 1 + more
    raw = (first & 0x7F).astype(np.int64)
    size = np.ones_like(pos)
    shift = 7
    while more.any():
        if shift > 63:
            raise _Fallback
        byte = arr[pos + size].astype(np.int64)
        raw |= np.where(more, (byte & 0x7F) << shift, 0)
        size += more
        more &= byte >= 0x80
        shift += 7
    return (raw >> 1) ^ -(raw & 1), pos + size


def _binary(arr: np.ndarray, at: np.ndarray, size: np.ndarray) -> pa.Array:
    """A binary column of the byte ranges ``arr[at:at+size]`` (size -1: null).

    The ranges are in order and never overlap (other fields lie between any
    two), so the buffer alternates gap, range, gap, range...: one ``np.repeat``
    of alternating flags by those run lengths marks the bytes to keep, and
    Arrow's filter copies them out. Per-byte numpy work (a running sum, a
    boolean index) costs several times more.
    """
    n = len(size)
    lengths = np.maximum(size, 0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total > np.iinfo(np.int32).max:
        raise _Fallback
    nulls = size < 0
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
    if total:
        runs = np.empty(2 * n + 1, np.int64)
        runs[0] = at[0]
        runs[1:-1:2] = lengths
        runs[2:-1:2] = at[1:] - (at[:-1] + lengths[:-1])
        runs[-1] = len(arr) - (at[-1] + lengths[-1])
        flags = np.zeros(2 * n + 1, np.bool_)
        flags[1::2] = True
        keep = np.packbits(np.repeat(flags, runs), bitorder="little")
        everything = pa.Array.from_buffers(pa.uint8(), len(arr), [None, pa.py_buffer(arr)])
        kept = pa.Array.from_buffers(pa.bool_(), len(arr), [None, pa.py_buffer(keep)])
        data = everything.filter(kept).buffers()[1]
    else:
        data = pa.py_buffer(b"")
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(offsets.astype(np.int32)), data],
        null_count=int(nulls.sum()),
    )


def _exact(data: bytes, topic: str, partition: int, start: int, end: int) -> pa.RecordBatch | None:
    """The client's record parser, batch by batch: headers, and precise errors."""
    records: list[ConsumerRecord] = []
    pos = 0
    view = memoryview(data)
    while pos < len(data):
        header = check_batch(data, pos, len(data))
        size = header.batch_length + LOG_OVERHEAD
        if not header.attributes & CONTROL_BIT:
            kind = 1 if header.attributes & TIMESTAMP_TYPE_BIT else 0
            records += [
                ConsumerRecord(topic, partition, r[0], r[1], r[2], r[3], r[4], kind)
                for r in decode_records(view[pos : pos + size])
                if start <= r[0] < end
            ]
        pos += size
    return to_arrow(records) if records else None

"""Many keyless, headerless records of one timestamp, encoded in one pass.

What ``Producer.send_many`` appends: each record is the same few pieces (see
:mod:`mq.records.records` for the layout)::

    length | 0x00 | timestampDelta | offsetDelta | 0x01 (null key) | valueLength | value | 0x00

The varints of small numbers come from a table built once (every zigzag
varint below :data:`TABLE_SIZE`), the pieces of all records are joined in one
``bytes.join``, and no function is called per record: about a fifth of the
cost of :meth:`BatchBuilder.append <mq.records.records.BatchBuilder.append>`
per record, measured in ``benchmarks.client``.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Final

TABLE_SIZE: Final = 1 << 13
"""Numbers with a table varint (two bytes at most): offset deltas, value and record lengths."""

_table: list[bytes] = []


def varint(value: int) -> bytes:
    """The zigzag varint of ``value`` (an int64; the record fields' encoding)."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _varints() -> list[bytes]:
    if not _table:
        _table.extend(varint(n) for n in range(TABLE_SIZE))
    return _table


def encode_values(
    values: Sequence[bytes | None],
    start: int,
    first_delta: int,
    timestamp_delta: int,
    room: int,
) -> tuple[bytes, int]:
    """Records for ``values[start:]`` at offset deltas from ``first_delta``, as many as fit.

    Returns the encoded records and how many there are. They take at most
    ``room`` bytes, except that a batch's first record (``first_delta`` 0)
    always goes in, so that a batch of one oversized record still reaches the
    broker, which refuses it. A value of None is a null value. The caller
    checks that ``timestamp_delta`` fits an int64.
    """
    table = _varints()
    ts = varint(timestamp_delta)
    fixed = len(ts) + 3  # attributes, null key, zero headers
    parts: list[bytes] = []
    add = parts.append
    delta = first_delta
    for value in islice(values, start, None):
        od = table[delta] if delta < TABLE_SIZE else varint(delta)
        if value is None:
            size = fixed + len(od) + 1
            vl, value = b"\x01", b""
        else:
            length = len(value)
            vl = table[length] if length < TABLE_SIZE else varint(length)
            size = fixed + len(od) + len(vl) + length
        head = table[size] if size < TABLE_SIZE else varint(size)
        room -= len(head) + size
        if room < 0 and delta:
            break
        add(head)
        add(b"\x00")
        add(ts)
        add(od)
        add(b"\x01")
        add(vl)
        add(value)
        add(b"\x00")
        delta += 1
    return b"".join(parts), delta - first_delta

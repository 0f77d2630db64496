"""Framing: a 4-byte big-endian unsigned length N, then N bytes of msgpack.

Sans-IO, in the manner of h11 and nats-server's parser: :class:`FrameDecoder`
is fed whatever bytes the transport delivered and hands back complete frames,
or :data:`NEED_DATA` when the next frame is not complete yet. It never reads
a socket and never waits.

Bounds: a length prefix is checked against ``max_frame_bytes`` as soon as its
four bytes are in, before a byte of the frame is buffered; zero or too large
is a :class:`~mq.errors.ProtocolError` (the connection can no longer be
trusted and the owner closes it). Frames that came before the bad prefix are
still delivered first.

Cost: one ``bytearray`` per decoder. Bytes are appended at the end; consumed
frames advance a start offset, and the consumed prefix is dropped on the next
:meth:`FrameDecoder.feed` (``del buf[:n]``, which CPython does in O(1) by moving
the array's logical start). Feeding one byte at a time or a 64 MiB frame in
64 KiB chunks is linear in the bytes fed. A frame reaches its ``decode``
callable as a memoryview of the buffer, so unpacking a request does not copy
the frame first.
"""

from __future__ import annotations

import enum
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Generic, Literal, TypeAlias, TypeVar, overload

import msgpack

from mq.errors import FrameTooLargeError, ProtocolError
from mq.wire.limits import FRAME_HEADER_BYTES, MAX_FRAME_BYTES

_LENGTH = struct.Struct(">I")
_MAX_REPRESENTABLE = (1 << 32) - 1
"""The largest length a 4-byte unsigned prefix can carry."""

T = TypeVar("T")


class _Need(enum.Enum):
    NEED_DATA = "NEED_DATA"


NEED_DATA: Literal[_Need.NEED_DATA] = _Need.NEED_DATA
"""Returned by :meth:`FrameDecoder.next_frame` when the next frame is incomplete."""


def encode_frame(payload: object, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """One frame: ``payload`` packed with msgpack behind its 4-byte length.

    ``bytes``, ``bytearray`` and ``memoryview`` values become msgpack ``bin``
    and ``str`` becomes msgpack ``str``. The payload is packed into the
    packer's buffer and then copied once into the frame, which is exactly what
    ``msgpack.packb`` does (pack, then copy into a ``bytes``): a record batch
    is copied twice, as by msgpack alone, and the length costs no third copy.

    Raises FrameTooLargeError if the payload is longer than ``max_frame_bytes``
    (the receiver would refuse it and close the connection); TypeError or
    OverflowError for a value msgpack cannot pack (a bug in the caller).
    """
    packer = msgpack.Packer(autoreset=False, use_bin_type=True, datetime=False)
    packer.pack(payload)
    bound = min(max_frame_bytes, _MAX_REPRESENTABLE)
    with packer.getbuffer() as view:
        size = len(view)
        if size > bound:
            raise FrameTooLargeError(
                f"the frame's payload is {size} bytes, more than the bound of {bound}"
            )
        return _LENGTH.pack(size) + view


PIECE_DEPTH: Final = 4
"""How deep :func:`encode_frame_in_pieces` goes into maps and arrays before it packs a
value whole: a response body's lists of topics and their lists of partitions."""


def encode_frame_in_pieces(payload: object, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """:func:`encode_frame`, but packing maps and arrays entry by entry down to
    :data:`PIECE_DEPTH` (deeper values whole): the same bytes, made by many short calls
    into msgpack instead of one long one, so that a thread packing a frame of 100,000
    entries lets other threads take the GIL between them. Slower (a Python call per
    entry): for big frames made off the event loop."""
    return encode_counted_frame_in_pieces(payload, _no_count, max_frame_bytes)[0]


def encode_counted_frame_in_pieces(
    payload: object,
    count_whole: Callable[[object], int],
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> tuple[bytes, int]:
    """:func:`encode_frame_in_pieces`, and the payload's array items plus map entries,
    counted in the same walk (a second walk of a 100,000-entry body only to count it
    took more of the GIL than the packing): those of the maps and arrays packed entry
    by entry, plus ``count_whole`` of each map or array packed whole."""
    packer = msgpack.Packer(autoreset=False, use_bin_type=True, datetime=False)
    items = _pack_in_pieces(packer, payload, 0, count_whole)
    bound = min(max_frame_bytes, _MAX_REPRESENTABLE)
    with packer.getbuffer() as view:
        size = len(view)
        if size > bound:
            raise FrameTooLargeError(
                f"the frame's payload is {size} bytes, more than the bound of {bound}"
            )
        return _LENGTH.pack(size) + view, items


def _no_count(value: object) -> int:
    return 0


def _pack_in_pieces(
    packer: msgpack.Packer, value: object, depth: int, count_whole: Callable[[object], int]
) -> int:
    """Pack ``value``; its items (see :func:`encode_counted_frame_in_pieces`)."""
    kind = type(value)
    if depth >= PIECE_DEPTH:
        packer.pack(value)
        return count_whole(value) if kind is dict or kind is list or kind is tuple else 0
    if kind is dict:
        entries: dict[Any, Any] = value  # type: ignore[assignment]
        packer.pack_map_header(len(entries))
        items = len(entries)
        for key, item in entries.items():
            packer.pack(key)
            items += _pack_in_pieces(packer, item, depth + 1, count_whole)
        return items
    if kind is list or kind is tuple:
        elements: Sequence[Any] = value  # type: ignore[assignment]
        packer.pack_array_header(len(elements))
        items = len(elements)
        for item in elements:
            items += _pack_in_pieces(packer, item, depth + 1, count_whole)
        return items
    packer.pack(value)
    return 0


Buffer: TypeAlias = bytes | bytearray | memoryview

_MARKER_MAGIC: Final = os.urandom(16)
"""Per process: what :func:`encode_frame_parts` packs in place of a lifted value."""
_BIN8, _BIN16, _BIN32 = struct.Struct(">BB"), struct.Struct(">BH"), struct.Struct(">BI")


def marker(index: int) -> bytes:
    """The placeholder for the ``index``-th lifted value: a 20-byte bin no caller makes."""
    return _MARKER_MAGIC + index.to_bytes(4, "big")


def _bin_header(size: int) -> bytes:
    if size < 0x100:
        return _BIN8.pack(0xC4, size)
    if size < 0x10000:
        return _BIN16.pack(0xC5, size)
    return _BIN32.pack(0xC6, size)


def encode_frame_parts(
    payload: object, lifted: Sequence[Buffer], max_frame_bytes: int = MAX_FRAME_BYTES
) -> list[Buffer]:
    """:func:`encode_frame` for a payload whose large binary values travel uncopied.

    ``payload`` holds :func:`marker` ``(i)`` where the ``i``-th of ``lifted``
    belongs. The frame comes back as buffers to write in order (``writelines``,
    a ``writev``): the packed payload cut at each marker, each cut followed by
    the lifted value itself. A record set of a produce request or a fetch
    response thus reaches the socket without the two copies that packing it
    costs (into msgpack's buffer, then into the frame), which for large batches
    cost more than the rest of the request. ``b"".join`` of the parts equals
    :func:`encode_frame` of the payload with the values in place.

    A marker is a bin of 16 random bytes chosen per process and an index: it
    cannot collide with what a caller packs unless the caller passes that
    exact byte string. Raises FrameTooLargeError like :func:`encode_frame`.
    """
    packer = msgpack.Packer(autoreset=False, use_bin_type=True, datetime=False)
    packer.pack(payload)
    bound = min(max_frame_bytes, _MAX_REPRESENTABLE)
    with packer.getbuffer() as view:
        packed = bytes(view)
    sizes = [v.nbytes if isinstance(v, memoryview) else len(v) for v in lifted]
    packed_marker = len(_bin_header(20)) + 20
    size = len(packed) + sum(len(_bin_header(n)) + n - packed_marker for n in sizes)
    if size > bound:
        raise FrameTooLargeError(
            f"the frame's payload is {size} bytes, more than the bound of {bound}"
        )
    parts: list[Buffer] = []
    head = _LENGTH.pack(size)
    pos = 0
    for i, value in enumerate(lifted):
        at = packed.find(_bin_header(20) + marker(i), pos)
        if at < 0:
            raise ValueError(f"the payload holds no marker {i}")
        parts.append(head + packed[pos:at] + _bin_header(sizes[i]))
        parts.append(value)
        head = b""
        pos = at + packed_marker
    parts.append(head + packed[pos:])
    return parts


class FrameDecoder(Generic[T]):
    """Splits a byte stream into frames and decodes each with ``decode``.

    ``decode`` receives a memoryview of one frame's payload that is valid only
    during the call (it is released afterwards): it must copy what it keeps.
    The default, ``bytes``, copies the payload; :func:`mq.wire.messages.unpack_request`
    unpacks the msgpack straight from the buffer. If ``decode`` raises, the
    frame is consumed all the same, so the owner may answer the error and go on
    with the next frame. Errors of the framing itself (a bad length prefix) are
    sticky: every later call raises again.

    Not thread-safe: one decoder per connection, used by one task.
    """

    __slots__ = (
        "_buf",
        "_completed",
        "_decode",
        "_error",
        "_frame_end",
        "_max",
        "_scanned",
        "_start",
    )

    @overload
    def __init__(self: FrameDecoder[bytes], max_frame_bytes: int = MAX_FRAME_BYTES) -> None: ...

    @overload
    def __init__(
        self, max_frame_bytes: int = MAX_FRAME_BYTES, *, decode: Callable[[memoryview], T]
    ) -> None: ...

    def __init__(
        self,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        *,
        decode: Callable[[memoryview], Any] | None = None,
    ) -> None:
        if not 1 <= max_frame_bytes <= _MAX_REPRESENTABLE:
            raise ValueError(f"max_frame_bytes must be in [1, {_MAX_REPRESENTABLE}]")
        self._max = max_frame_bytes
        self._decode: Callable[[memoryview], Any] = bytes if decode is None else decode
        self._buf = bytearray()
        self._start = 0
        """Where the first unconsumed frame begins."""
        self._scanned = 0
        """End of the complete frames: every frame in [_start, _scanned) is whole."""
        self._error: ProtocolError | None = None
        """The framing error found at _scanned, raised once the frames before it are out."""
        self._frame_end = 0
        """End of the frame in progress as its length prefix declares (0: no prefix yet)."""
        self._completed = 0
        """Frames whose last byte has arrived, since the start."""

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed and not yet handed out as frames (for read back-pressure)."""
        return len(self._buf) - self._start

    @property
    def reserve_bytes(self) -> int:
        """What the buffer will hold once the frame in progress is complete: the bytes fed
        and not handed out, plus the rest of the frame whose length prefix is in.

        An owner with a memory budget reserves this as soon as a prefix arrives, before
        the frame's bytes are buffered (the prefix was already checked against the bound).
        """
        return max(len(self._buf), self._frame_end) - self._start

    @property
    def complete_bytes(self) -> int:
        """Bytes of the complete frames waiting to be handed out."""
        return self._scanned - self._start

    @property
    def frames_completed(self) -> int:
        """How many frames have been completed since the start (a partial frame's age
        restarts when this moves)."""
        return self._completed

    @property
    def at_frame_boundary(self) -> bool:
        """True when no partial frame is buffered: the stream may end here cleanly."""
        return self._start == len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` to the stream.

        Raises ProtocolError (FrameTooLargeError for a length above the bound)
        at once when the next frame's length prefix is invalid and no complete
        frame is waiting before it; otherwise :meth:`next_frame` raises it after
        handing out those frames.
        """
        self._raise_if_broken()
        buf = self._buf
        if self._start:
            del buf[: self._start]
            self._scanned -= self._start
            if self._frame_end:
                self._frame_end -= self._start
            self._start = 0
        buf += data
        self._scan()
        if self._scanned == self._start:
            self._raise_if_broken()

    def next_frame(self) -> T | Literal[_Need.NEED_DATA]:
        """The next complete frame, decoded, or NEED_DATA."""
        start = self._start
        if start == self._scanned:
            self._raise_if_broken()
            return NEED_DATA
        (size,) = _LENGTH.unpack_from(self._buf, start)
        begin = start + FRAME_HEADER_BYTES
        self._start = begin + size
        with memoryview(self._buf) as whole, whole[begin : begin + size] as payload:
            result: T = self._decode(payload)
            return result

    def frames(self) -> Iterator[T]:
        """Every complete frame buffered now, decoded, in order."""
        while (frame := self.next_frame()) is not NEED_DATA:
            yield frame

    def _scan(self) -> None:
        """Advance _scanned over whole frames, checking each length prefix once."""
        buf, pos, end, bound = self._buf, self._scanned, len(self._buf), self._max
        self._frame_end = 0
        while self._error is None and end - pos >= FRAME_HEADER_BYTES:
            (size,) = _LENGTH.unpack_from(buf, pos)
            if size == 0:
                self._error = ProtocolError("a frame announced a zero-length payload")
            elif size > bound:
                self._error = FrameTooLargeError(
                    f"a frame announced {size} bytes, more than the bound of {bound}"
                )
            elif end - pos - FRAME_HEADER_BYTES < size:
                self._frame_end = pos + FRAME_HEADER_BYTES + size
                break
            else:
                pos += FRAME_HEADER_BYTES + size
                self._completed += 1
        self._scanned = pos

    def _raise_if_broken(self) -> None:
        if self._error is not None:
            raise type(self._error)(self._error.message)

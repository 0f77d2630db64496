"""The compression codecs of RecordBatch v2 (attributes bits 0-2), Kafka-compatible.

A batch compresses its records section as one block. Each codec writes what a
Kafka client writes, so batches cross between mq and Kafka clients both ways:

* gzip: an RFC 1952 member (zlib, level 6 as Kafka's default); decoding accepts
  several members back to back, as Java's ``GZIPInputStream`` does.
* snappy: Kafka's Java client writes xerial framing (``\\x82SNAPPY\\x00``, two
  big-endian int32 version fields, then blocks of at most 32 KiB of input, each
  a big-endian int32 length and a raw snappy block). We write the same; we read
  both that and plain raw snappy (what some non-Java clients send).
* lz4: the LZ4 frame format with independent 64 KiB blocks, block checksums
  and no content checksum. Kafka's reader rejects linked blocks, which
  ``cramjam.lz4.compress`` writes, so frames go through
  ``cramjam.lz4.Compressor(block_linked=False)``.
* zstd: a standard zstd frame (level 3, Kafka's default); several frames back
  to back decode as one stream.

Every decoder takes ``max_size`` and raises :class:`CorruptRecordError` rather
than produce more: a batch of a few KiB can otherwise claim gigabytes (a
decompression bomb). Sizes are checked before output is allocated wherever the
format states them (raw snappy, xerial blocks) and bounded by the output buffer
or zlib's ``max_length`` elsewhere, so the bound holds for memory, not just for
the result.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Final, TypeAlias

import cramjam

from mq.errors import CorruptRecordError, UnsupportedCompressionError

Buffer: TypeAlias = bytes | bytearray | memoryview

CODEC_NONE: Final = 0
CODEC_GZIP: Final = 1
CODEC_SNAPPY: Final = 2
CODEC_LZ4: Final = 3
CODEC_ZSTD: Final = 4

CODEC_NAMES: Final[dict[int, str]] = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}
CODECS_BY_NAME: Final[dict[str, int]] = {name: codec for codec, name in CODEC_NAMES.items()}

GZIP_LEVEL: Final = 6
"""zlib's default, which is what Kafka's ``compression.gzip.level=-1`` means."""
ZSTD_LEVEL: Final = 3
"""Kafka's default ``compression.zstd.level``; cramjam's own default (11) is far slower."""

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE: Final = 32 * 1024
"""Input bytes per xerial block: xerial's ``SnappyOutputStream`` default, which Kafka uses."""
_BE_INT32: Final = struct.Struct(">i")

_FIRST_GUESS_MIN: Final = 64 * 1024
_FIRST_GUESS_RATIO: Final = 8
"""For lz4 and zstd the output size is unknown up front: the first buffer is
this many times the input (at least 64 KiB), then grows fourfold up to the bound.
Typical record data compresses 2-8x, so one attempt is the common case."""
_OUTPUT_FULL: Final = "failed to write whole buffer"
"""cramjam's message when ``decompress_into`` runs out of room (pinned by a test)."""


def codec_name(codec: int) -> str:
    """The Kafka name of a codec id (``"none"``, ``"gzip"``, ...)."""
    try:
        return CODEC_NAMES[codec]
    except KeyError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}") from None


def codec_by_name(name: str) -> int:
    """The codec id for a Kafka ``compression.type`` name."""
    try:
        return CODECS_BY_NAME[name]
    except KeyError:
        raise UnsupportedCompressionError(f"unknown compression type {name!r}") from None


def compress(codec: int, data: Buffer) -> bytes:
    """Compress a batch's records section with ``codec``."""
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        return zlib.compress(data, GZIP_LEVEL, wbits=31)
    if codec == CODEC_SNAPPY:
        return _xerial_encode(data)
    if codec == CODEC_LZ4:
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        # The streaming compressor takes only bytes.
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def decompress(codec: int, data: Buffer, max_size: int) -> bytes:
    """Decompress a records section, refusing to produce more than ``max_size`` bytes.

    Raises :class:`CorruptRecordError` when the input is not valid for the codec
    or would decompress past ``max_size``, and
    :class:`UnsupportedCompressionError` for a codec id this module lacks.
    """
    if codec == CODEC_NONE:
        _check_size(len(data), max_size)
        return bytes(data)
    if codec == CODEC_GZIP:
        return _gunzip(data, max_size)
    if codec == CODEC_SNAPPY:
        return _snappy_decode(data, max_size)
    if codec == CODEC_LZ4:
        return _decompress_bounded(cramjam.lz4.decompress_into, "lz4", data, max_size)
    if codec == CODEC_ZSTD:
        return _decompress_bounded(cramjam.zstd.decompress_into, "zstd", data, max_size)
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def _check_size(size: int, max_size: int) -> None:
    if size > max_size:
        raise CorruptRecordError(f"records decompress to more than {max_size} bytes")


def _gunzip(data: Buffer, max_size: int) -> bytes:
    """Inflate one or more gzip members; ``max_length`` caps each step's output."""
    out = bytearray()
    rest: Buffer = data
    try:
        while True:
            inflater = zlib.decompressobj(wbits=31)
            # max_length >= 1 here (0 would mean "no limit").
            out += inflater.decompress(rest, max_size + 1 - len(out))
            _check_size(len(out), max_size)
            if not inflater.eof:
                raise CorruptRecordError("gzip stream is truncated")
            rest = inflater.unused_data
            if not rest:
                return bytes(out)
    except zlib.error as exc:
        raise CorruptRecordError(f"invalid gzip data: {exc}") from exc


def _xerial_encode(data: Buffer) -> bytes:
    """Xerial-framed snappy, block for block what Kafka's Java producer writes."""
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        out += _BE_INT32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decode(data: Buffer, max_size: int) -> bytes:
    """Decode xerial-framed or raw snappy; every block's stated size is checked first."""
    view = memoryview(data)
    if len(view) < len(_XERIAL_HEADER) or view[: len(XERIAL_MAGIC)].tobytes() != XERIAL_MAGIC:
        return _snappy_raw(view, max_size)
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("xerial snappy block length is truncated")
        (length,) = _BE_INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes runs past the end")
        out += _snappy_raw(view[pos : pos + length], max_size - len(out))
        pos += length
    return bytes(out)


def _snappy_raw(block: memoryview, max_size: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(block)
        _check_size(size, max_size)
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"invalid snappy data: {exc}") from exc


def _decompress_bounded(
    decompress_into: Callable[[Buffer, bytearray], int], name: str, data: Buffer, max_size: int
) -> bytes:
    """Decompress into a fixed buffer, growing it fourfold until the bound.

    ``decompress_into`` fails once the buffer is full instead of allocating, so
    memory stays within ``max_size + 1`` whatever the input claims. A result of
    exactly ``max_size + 1`` bytes means there was more.
    """
    limit = max_size + 1
    size = min(max(len(data) * _FIRST_GUESS_RATIO, _FIRST_GUESS_MIN), limit)
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _OUTPUT_FULL not in str(exc):
                raise CorruptRecordError(f"invalid {name} data: {exc}") from exc
            if size >= limit:
                raise CorruptRecordError(
                    f"records decompress to more than {max_size} bytes"
                ) from exc
            size = min(size * 4, limit)
            continue
        _check_size(written, max_size)
        del out[written:]
        return bytes(out)

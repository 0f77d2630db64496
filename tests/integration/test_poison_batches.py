"""Poison batches over the wire: a real broker refuses them and keeps serving the partition.

Each batch here has a valid header and CRC over records that do not parse (the
shapes of issue 17, point 6). Before the broker checked records at produce it
stored them, and every consumer of the partition then failed on every poll.
Now each produce gets INVALID_RECORD with a message naming the batch, the
record and the field, nothing of the request is stored, and valid batches
before and after read back whole.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import cramjam
import pytest
from test_broker_protocol import Raw, batch, create, produce_body, read_all

from mq.records import batch as fmt
from mq.records.compression import CODEC_ZSTD
from mq.records.records import build_batch
from mq.wire import apis_data

INVALID_RECORD = 87


def _with_section(template: bytes, section: bytes, count: int) -> bytes:
    """``template``'s header over ``section``, with length, counts and CRC made to match."""
    out = bytearray(template[: fmt.RECORDS_AT] + section)
    struct.pack_into(">i", out, fmt.LENGTH_AT, len(out) - fmt.LOG_OVERHEAD)
    struct.pack_into(">i", out, 23, count - 1)  # lastOffsetDelta
    struct.pack_into(">i", out, 57, count)  # recordsCount
    fmt.write_header(out, fmt.parse_header(out))
    return bytes(out)


def _record(body: bytes) -> bytes:
    """A record: its length (one-byte varint) and ``body``."""
    assert len(body) < 64
    return bytes([len(body) << 1]) + body


def _now() -> int:
    return int(time.time() * 1000)


def count_mismatch() -> bytes:
    # recordsCount 1,000 and lastOffsetDelta 999, one record present
    one = batch([b"only one"])
    return _with_section(one, one[fmt.RECORDS_AT :], 1000)


def negative_key_length() -> bytes:
    # attributes, ts delta 0, offset delta 0, key length -3
    return _with_section(batch([b"x"]), _record(b"\x00\x00\x00\x05abc\x02v\x00"), 1)


def negative_value_length() -> bytes:
    return _with_section(batch([b"x"]), _record(b"\x00\x00\x00\x01\x09\x00\x00\x00"), 1)


def negative_header_length() -> bytes:
    # one header whose key length is -1
    return _with_section(batch([b"x"]), _record(b"\x00\x00\x00\x01\x02v\x02\x01\x02v"), 1)


def header_key_not_utf8() -> bytes:
    return _with_section(batch([b"x"]), _record(b"\x00\x00\x00\x01\x02v\x02\x04\xff\xfe\x02v"), 1)


def header_count_huge() -> bytes:
    return _with_section(batch([b"x"]), _record(b"\x00\x00\x00\x01\x02v\xfe\x01"), 1)


def trailing_bytes() -> bytes:
    good = batch([b"a", b"b"])
    return _with_section(good, good[fmt.RECORDS_AT :] + b"\x00\x00\x00", 2)


def offset_deltas_out_of_order() -> bytes:
    # two records, both at offset delta 0
    body = _record(b"\x00\x00\x00\x01\x02a\x00")
    return _with_section(batch([b"a", b"b"]), body + body, 2)


def zstd_bomb() -> bytes:
    """About 32 KiB of zstd that inflates to 1 GiB (compressed a MiB at a time)."""
    compressor = cramjam.zstd.Compressor(level=3)
    payload = bytearray()
    chunk = bytes(1 << 20)
    for _ in range(1024):
        compressor.compress(chunk)
        payload += bytes(compressor.flush())
    payload += bytes(compressor.finish())
    template = build_batch([(None, b"v", [], _now())], codec=CODEC_ZSTD)
    bomb = _with_section(template, bytes(payload), 1)
    assert len(bomb) < 40 * 1024
    return bomb


POISON: dict[str, tuple[Callable[[], bytes], str]] = {
    "count-mismatch": (count_mismatch, "cannot hold 1000 records"),
    "negative-key-length": (negative_key_length, "record 0: key length -3 is negative"),
    "negative-value-length": (negative_value_length, "record 0: value length -5 is negative"),
    "negative-header-length": (negative_header_length, "header 0 key length -1 is negative"),
    "header-key-not-utf8": (header_key_not_utf8, "record 0: header 0 key is not UTF-8"),
    "header-count-huge": (header_count_huge, "record 0: header count 127 does not fit"),
    "trailing-bytes": (trailing_bytes, "3 bytes follow the last record"),
    "offset-deltas": (offset_deltas_out_of_order, "record 1: offset delta 0, expected 1"),
    "zstd-bomb": (zstd_bomb, "zstd): records decompress to more than"),
}


@pytest.mark.parametrize(("make", "message"), POISON.values(), ids=POISON)
def test_a_poison_batch_is_refused_and_the_partition_keeps_serving(
    bootstrap: str, make: Callable[[], bytes], message: str, request: pytest.FixtureRequest
) -> None:
    topic = f"poison-{request.node.callspec.id}"
    with Raw(bootstrap) as raw:
        create(raw, topic)
        raw.call(apis_data.PRODUCE, produce_body(topic, 0, batch([b"before"])))
        poison = make()
        for records in (poison, batch([b"not stored either"]) + poison):
            result = raw.call(apis_data.PRODUCE, produce_body(topic, 0, records))
            part = result["topics"][0]["partitions"][0]
            assert part["error"] == INVALID_RECORD, part
            assert message in part["message"], part
        raw.call(apis_data.PRODUCE, produce_body(topic, 0, batch([b"after"])))
        assert read_all(raw, topic, 0) == [b"before", b"after"]

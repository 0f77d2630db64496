"""Framing: 4-byte big-endian length + msgpack, decoded sans-IO from any chunking."""

from __future__ import annotations

import itertools
import struct
import time
import tracemalloc
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mq.errors import FrameTooLargeError, MQError, ProtocolError
from mq.wire.frames import NEED_DATA, FrameDecoder, encode_frame

MiB = 1 << 20

payloads = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def drain(decoder: FrameDecoder[Any]) -> list[Any]:
    return list(decoder.frames())


def feed_in_chunks(stream: bytes, cuts: list[int], decoder: FrameDecoder[Any]) -> list[Any]:
    out: list[Any] = []
    edges = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    for start, end in itertools.pairwise(edges):
        decoder.feed(stream[start:end])
        out += drain(decoder)
    return out


def test_frame_layout_is_length_then_msgpack() -> None:
    frame = encode_frame({"a": b"\x00\x01"})
    (size,) = struct.unpack(">I", frame[:4])
    assert size == len(frame) - 4
    assert msgpack.unpackb(frame[4:]) == {"a": b"\x00\x01"}
    # bytes-likes become bin, str becomes str
    assert msgpack.unpackb(encode_frame([bytearray(b"x"), memoryview(b"y"), "z"])[4:]) == [
        b"x",
        b"y",
        "z",
    ]


@given(st.lists(payloads, min_size=1, max_size=6))
def test_whole_stream_and_one_byte_at_a_time_give_the_same_frames(objs: list[Any]) -> None:
    stream = b"".join(encode_frame(o) for o in objs)
    whole = FrameDecoder()
    whole.feed(stream)
    frames = drain(whole)
    byte_by_byte = FrameDecoder()
    trickled: list[bytes] = []
    for i in range(len(stream)):
        byte_by_byte.feed(stream[i : i + 1])
        trickled += drain(byte_by_byte)
    assert frames == trickled
    assert [msgpack.unpackb(f, raw=False, strict_map_key=False) for f in frames] == objs
    assert whole.at_frame_boundary
    assert byte_by_byte.at_frame_boundary


@given(st.lists(payloads, min_size=1, max_size=6), st.lists(st.integers(0, 10_000), max_size=8))
def test_any_chunking_gives_the_same_frames(objs: list[Any], cuts: list[int]) -> None:
    frames = [encode_frame(o) for o in objs]
    stream = b"".join(frames)
    got = feed_in_chunks(stream, cuts, FrameDecoder())
    assert got == [f[4:] for f in frames]


def test_many_frames_in_one_feed_come_out_in_order() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"".join(encode_frame(i) for i in range(1000)))
    assert [msgpack.unpackb(f) for f in drain(decoder)] == list(range(1000))
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered_bytes == 0


def test_partial_frame_needs_more_data() -> None:
    frame = encode_frame({"k": "v" * 100})
    decoder = FrameDecoder()
    decoder.feed(frame[:2])  # half a header
    assert decoder.next_frame() is NEED_DATA
    decoder.feed(frame[2:50])  # header and part of the payload
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered_bytes == 50
    assert not decoder.at_frame_boundary
    decoder.feed(frame[50:] + frame[:3])  # the rest, and the start of the next frame
    assert decoder.next_frame() == frame[4:]
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered_bytes == 3


def test_a_header_announcing_2_gib_raises_at_once_without_allocating() -> None:
    decoder = FrameDecoder(max_frame_bytes=100 * MiB)
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLargeError, match="2147483648 bytes"):
            decoder.feed(struct.pack(">I", 2 * 1024 * MiB))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MiB


def test_the_bound_is_inclusive() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    decoder.feed(struct.pack(">I", 10) + b"\x00" * 10)
    assert decoder.next_frame() == b"\x00" * 10
    with pytest.raises(FrameTooLargeError):
        decoder.feed(struct.pack(">I", 11))


def test_zero_length_frame_is_a_protocol_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match="zero-length") as info:
        decoder.feed(b"\x00\x00\x00\x00")
    assert not isinstance(info.value, FrameTooLargeError)
    assert info.value.code == 42


def test_frames_before_a_bad_header_come_out_then_the_error_sticks() -> None:
    good = encode_frame("ok")
    decoder = FrameDecoder(max_frame_bytes=1000)
    decoder.feed(good + good + struct.pack(">I", 5000))
    assert decoder.next_frame() == good[4:]
    assert decoder.next_frame() == good[4:]
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    with pytest.raises(FrameTooLargeError):
        decoder.feed(good)


def test_decode_gets_a_view_of_the_buffer_released_after_the_call() -> None:
    kept: list[memoryview] = []

    def keep(view: memoryview) -> int:
        kept.append(view)
        return len(view)

    decoder = FrameDecoder(decode=keep)
    decoder.feed(encode_frame(b"x" * 10) + encode_frame(1))
    assert list(decoder.frames()) == [12, 1]
    with pytest.raises(ValueError, match="released"):
        bytes(kept[0])
    decoder.feed(encode_frame(2))  # the buffer can be compacted: no view pins it
    assert list(decoder.frames()) == [1]


def test_a_failing_decode_consumes_its_frame_only() -> None:
    def strict(view: memoryview) -> Any:
        obj = msgpack.unpackb(view)
        if obj == "bad":
            raise ProtocolError("bad frame")
        return obj

    decoder = FrameDecoder(decode=strict)
    decoder.feed(encode_frame("a") + encode_frame("bad") + encode_frame("c"))
    assert decoder.next_frame() == "a"
    with pytest.raises(ProtocolError, match="bad frame"):
        decoder.next_frame()
    assert decoder.next_frame() == "c"


def test_encode_refuses_a_payload_above_the_bound() -> None:
    assert len(encode_frame(b"x" * 100, max_frame_bytes=102)) == 106
    with pytest.raises(FrameTooLargeError, match="103 bytes"):
        encode_frame(b"x" * 101, max_frame_bytes=102)


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(max_frame_bytes=0)
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(max_frame_bytes=1 << 32)


def test_framing_errors_are_mq_errors() -> None:
    assert issubclass(FrameTooLargeError, ProtocolError)
    assert issubclass(ProtocolError, MQError)


# Linear cost. A decoder that copied its whole buffer on every feed would copy
# 32 GiB for the 64 MiB frame and 500 GB for the byte-by-byte one; a linear one
# copies each byte about once. The bounds leave 10x or more of slack.


def test_a_64_mib_frame_in_64_kib_chunks_costs_about_one_copy() -> None:
    frame = encode_frame(b"\xab" * (64 * MiB - 8))
    view, chunk = memoryview(frame), 64 * 1024

    start = time.perf_counter()
    whole = FrameDecoder()
    whole.feed(frame)
    assert whole.next_frame() == frame[4:]
    one_feed = time.perf_counter() - start

    start = time.perf_counter()
    decoder = FrameDecoder()
    for i in range(0, len(frame), chunk):
        decoder.feed(view[i : i + chunk])
        if i + chunk < len(frame):
            assert decoder.next_frame() is NEED_DATA
    assert decoder.next_frame() == frame[4:]
    chunked = time.perf_counter() - start
    assert chunked < 10 * one_feed + 0.5


def test_a_frame_fed_one_byte_at_a_time_is_linear() -> None:
    frame = encode_frame(b"\xcd" * (1 << 20))
    decoder = FrameDecoder()
    start = time.perf_counter()
    for i in range(len(frame)):
        decoder.feed(frame[i : i + 1])
    elapsed = time.perf_counter() - start
    assert decoder.next_frame() == frame[4:]
    assert elapsed < 15.0  # linear: about a second; quadratic: many minutes

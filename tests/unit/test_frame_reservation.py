"""What a FrameDecoder tells its owner about memory: the bytes to reserve for the frame
in progress (from its length prefix, before its bytes arrive), the complete frames
waiting, and how many frames have completed — the same at any chunking."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from mq.wire.frames import FrameDecoder, encode_frame


def test_a_length_prefix_reserves_its_whole_frame_before_its_bytes_arrive() -> None:
    decoder: FrameDecoder[bytes] = FrameDecoder(1 << 20)
    decoder.feed(b"\x00\x00")
    assert decoder.reserve_bytes == 2  # no prefix yet: what is buffered
    decoder.feed(struct.pack(">H", 1000))
    assert decoder.buffered_bytes == 4
    assert decoder.reserve_bytes == 4 + 1000
    decoder.feed(b"x" * 10)
    assert decoder.reserve_bytes == 4 + 1000
    assert decoder.complete_bytes == 0
    assert decoder.frames_completed == 0


def test_complete_frames_waiting_are_counted_until_handed_out() -> None:
    frame = encode_frame(b"abc")
    decoder: FrameDecoder[bytes] = FrameDecoder()
    decoder.feed(frame * 3 + frame[:5])
    assert decoder.frames_completed == 3
    assert decoder.complete_bytes == 3 * len(frame)
    assert decoder.reserve_bytes == 4 * len(frame)
    decoder.next_frame()
    assert decoder.complete_bytes == 2 * len(frame)
    assert decoder.reserve_bytes == 3 * len(frame)
    list(decoder.frames())
    decoder.feed(frame[5:])  # the prefix of the consumed frames is dropped here
    assert decoder.frames_completed == 4
    assert decoder.complete_bytes == len(frame)
    assert decoder.reserve_bytes == len(frame)
    list(decoder.frames())
    assert decoder.reserve_bytes == decoder.complete_bytes == 0


@given(
    st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=6),
    st.integers(1, 64),
)
def test_the_reservation_never_falls_below_what_is_buffered_at_any_chunking(
    payloads: list[bytes], chunk: int
) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    decoder: FrameDecoder[bytes] = FrameDecoder()
    out: list[bytes] = []
    for start in range(0, len(stream), chunk):
        decoder.feed(stream[start : start + chunk])
        assert decoder.reserve_bytes >= decoder.buffered_bytes >= decoder.complete_bytes
        if decoder.buffered_bytes - decoder.complete_bytes >= 4:
            # a prefix is in: the frame in progress is reserved whole
            assert decoder.reserve_bytes > decoder.complete_bytes
        out += decoder.frames()
    assert decoder.frames_completed == len(payloads)
    assert decoder.reserve_bytes == 0
    assert len(out) == len(payloads)

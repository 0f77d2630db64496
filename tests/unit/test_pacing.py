"""The pieces of :mod:`mq.broker.pacing` that need no broker: packing in pieces gives
the same bytes, which bodies count as large, and the pacer's rhythm."""

from __future__ import annotations

from typing import Any

import pytest

from mq.broker.pacing import ENTRIES_PER_TURN, LARGE_LIST, Pacer, large_body
from mq.errors import FrameTooLargeError
from mq.wire.frames import encode_counted_frame_in_pieces, encode_frame, encode_frame_in_pieces
from mq.wire.limits import MAX_DECODED_ITEMS
from mq.wire.messages import _items, encode_big_response_parts, encode_response_parts

BODIES: list[Any] = [
    None,
    {},
    [],
    {"topics": []},
    {"a": 1, "b": "x", "c": b"\x00\x01", "d": None, "e": True, "f": 1.5, "g": -(2**63)},
    {"topics": [{"name": f"t{i}", "partitions": list(range(i % 7))} for i in range(3_000)]},
    [1, [2, [3, [4, [5, [6, {"deep": [7, 8]}]]]]]],
    {"k": (1, 2, (3, 4)), "m": {"n": {"o": {"p": {"q": [1]}}}}},
]


@pytest.mark.parametrize("body", BODIES)
def test_packing_in_pieces_gives_the_same_frame(body: Any) -> None:
    assert encode_frame_in_pieces(body) == encode_frame(body)


@pytest.mark.parametrize("body", BODIES)
def test_packing_in_pieces_counts_the_items_a_receiver_decodes(body: Any) -> None:
    """The count made while packing is the separate walk's (issue 18: that walk of a
    100,000-topic answer took more of the GIL than its packing)."""
    frame, items = encode_counted_frame_in_pieces(body, _items)
    assert frame == encode_frame(body)
    assert items == _items(body)


def test_packing_in_pieces_keeps_the_frame_bound() -> None:
    body = {"topics": [{"name": "x" * 100} for _ in range(100)]}
    with pytest.raises(FrameTooLargeError):
        encode_frame_in_pieces(body, max_frame_bytes=1_000)


def test_a_big_response_is_the_same_frame_as_on_the_event_loop() -> None:
    body = {"topics": [{"name": f"t{i}", "error": 3, "partitions": []} for i in range(5_000)]}
    assert encode_big_response_parts(7, 0, body) == encode_response_parts(7, 0, body)
    fetched = {
        "topics": [{"name": "t", "partitions": [{"partition": 0, "records": b"r" * 20_000}]}]
    }
    big = b"".join(encode_big_response_parts(8, 0, fetched))
    assert big == b"".join(encode_response_parts(8, 0, fetched))


def test_large_bodies() -> None:
    assert not large_body(None)
    assert not large_body({"topics": [{"partitions": [0] * LARGE_LIST}]})
    assert large_body({"topics": [{"partitions": [0] * (LARGE_LIST + 1)}]})
    assert large_body({"topics": [{}] * (LARGE_LIST + 1)})
    halves = [{"partitions": [0] * (LARGE_LIST // 2 + 1)}] * 2
    assert large_body({"topics": halves})  # together past the bound


def test_the_pacer_is_due_once_every_entries_per_turn() -> None:
    pacer = Pacer()
    due = [i for i in range(1, 3 * ENTRIES_PER_TURN + 1) if pacer.due()]
    assert due == [ENTRIES_PER_TURN, 2 * ENTRIES_PER_TURN, 3 * ENTRIES_PER_TURN]


def test_a_big_response_with_more_items_than_a_receiver_decodes_is_refused() -> None:
    side = int(MAX_DECODED_ITEMS**0.5) + 1
    body = {"topics": [[{}] * side] * side}  # packed whole below the pieces' depth
    with pytest.raises(FrameTooLargeError, match="array items and map entries"):
        encode_big_response_parts(9, 0, body)

"""Frames written as parts: large record sets leave a frame uncopied, the bytes unchanged.

``b"".join`` of :func:`encode_request_parts` / :func:`encode_response_parts`
must equal :func:`encode_request` / :func:`encode_response` for any body,
with the record sets lifted out as buffers of their own only when they come
to :data:`LIFT_AT` bytes.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.errors import FrameTooLargeError
from mq.wire import apis_core, apis_data
from mq.wire.frames import encode_frame_parts, marker
from mq.wire.messages import (
    LIFT_AT,
    encode_request,
    encode_request_parts,
    encode_response,
    encode_response_parts,
)

sizes = st.lists(st.lists(st.integers(0, 3 * LIFT_AT), max_size=3), min_size=1, max_size=3)


def body_of(record_sizes: list[list[int]], view: bool) -> dict[str, Any]:
    def records(n: int, seed: int) -> bytes | memoryview:
        data = bytes((seed + i) % 251 for i in range(n))
        return memoryview(data) if view else data

    return {
        "topics": [
            {
                "name": f"t{t}",
                "partitions": [
                    {"partition": p, "records": records(n, t * 7 + p)} for p, n in enumerate(parts)
                ],
            }
            for t, parts in enumerate(record_sizes)
        ]
    }


@settings(max_examples=60, deadline=None)
@given(sizes)
def test_produce_requests_join_to_the_same_frame(record_sizes: list[list[int]]) -> None:
    body = {
        "acks": -1,
        "timeout_ms": 30_000,
        "transactional_id": None,
        **body_of(record_sizes, False),
    }
    parts = encode_request_parts(apis_data.PRODUCE, 0, 17, "client", body)
    assert b"".join(parts) == encode_request(apis_data.PRODUCE, 0, 17, "client", body)
    lifted = sum(map(sum, record_sizes)) >= LIFT_AT
    nonempty = sum(1 for ps in record_sizes for n in ps if n)
    assert len(parts) == (2 * nonempty + 1 if lifted else 1)


@settings(max_examples=60, deadline=None)
@given(sizes)
def test_fetch_responses_join_to_the_same_frame(record_sizes: list[list[int]]) -> None:
    body = body_of(record_sizes, True)
    parts = encode_response_parts(9, 0, body)
    assert b"".join(parts) == encode_response(9, 0, body)
    if sum(map(sum, record_sizes)) >= LIFT_AT:  # the record sets themselves, uncopied
        lifted = [p for p in parts if isinstance(p, memoryview)]
        assert [p.obj for p in lifted] == [
            r["records"].obj for t in body["topics"] for r in t["partitions"] if len(r["records"])
        ]


def test_bodies_without_record_sets_are_one_buffer() -> None:
    body = {"topics": ["a", "b"], "allow_auto_topic_creation": True}
    assert encode_request_parts(apis_core.METADATA, 0, 1, None, body) == [
        encode_request(apis_core.METADATA, 0, 1, None, body)
    ]
    assert encode_response_parts(1, 0, {"topics": [{"name": "a", "partitions": 3}]}) == [
        encode_response(1, 0, {"topics": [{"name": "a", "partitions": 3}]})
    ]


def test_lifted_frames_keep_the_size_bound() -> None:
    big = bytes(2 * LIFT_AT)
    payload = [1, {"records": marker(0)}]
    assert len(b"".join(encode_frame_parts(payload, [big]))) > 2 * LIFT_AT
    with pytest.raises(FrameTooLargeError):
        encode_frame_parts(payload, [big], max_frame_bytes=LIFT_AT)
    with pytest.raises(ValueError, match="no marker 1"):
        encode_frame_parts(payload, [big, big])

"""Fuzz invariant of the wire layer: any bytes either decode or raise an MQError.

Four sources of input: random bytes, random msgpack documents shaped like
envelopes, valid bodies of every API with random values put in or fields
taken out anywhere (so every validator sees every kind of wrong type), and
valid frames with bytes flipped, cut, inserted or dropped. Whatever
comes in, the decoders return or raise an :class:`~mq.errors.MQError`
subclass, never anything else; and what decodes re-encodes to the same thing.
"""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_strategies import slots, values

from mq.errors import InvalidRequestError, MQError, ProtocolError, UnsupportedVersionError
from mq.wire.frames import FrameDecoder
from mq.wire.messages import (
    Request,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    unpack_request,
    unpack_response,
)
from mq.wire.registry import Api, all_apis

APIS = all_apis()
FUZZ_FRAME_BYTES = 1 << 16
"""A small bound, so random length prefixes also land below it and reach msgpack."""
fuzz = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 64) - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner, max_size=4)
    ),
    max_leaves=16,
)


def requests_from(stream: bytes) -> list[Request[Any]]:
    """Feed ``stream`` to a server-side decoder as a server would; return what decodes.

    A ProtocolError from the framing or an envelope ends the stream (the server
    closes the connection); an error of decode_request is answered and skipped.
    Anything but an MQError escapes and fails the test.
    """
    decoder = FrameDecoder(FUZZ_FRAME_BYTES, decode=unpack_request)
    decoded: list[Request[Any]] = []
    codes: list[int] = []
    try:
        decoder.feed(stream)
        for envelope in decoder.frames():
            try:
                decoded.append(decode_request(envelope))
            except MQError as exc:  # answered with the envelope's correlation id
                codes.append(exc.code)
    except ProtocolError:  # the framing or an envelope: the connection is closed
        codes.append(ProtocolError.code)
    assert set(codes) <= {UnsupportedVersionError.code, InvalidRequestError.code}
    return decoded


def check_request_round_trip(request: Request[Any]) -> None:
    frame = encode_request(
        request.api, request.version, request.correlation_id, request.client_id, request.body
    )
    again = decode_request(frame[4:])
    assert (again.api, again.correlation_id, again.body) == (
        request.api,
        request.correlation_id,
        request.body,
    )


def decode_response_or_mq_error(payload: bytes, api: Api[Any, Any]) -> None:
    try:
        response = decode_response(payload, api, 0)
    except MQError:
        return
    if response.error_code == 0:
        again = decode_response(encode_response(1, 0, response.body)[4:], api, 0)
        assert again.body == response.body


@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=3000), st.sampled_from(APIS))
def test_random_bytes_decode_or_raise_mq_errors(stream: bytes, api: Api[Any, Any]) -> None:
    for request in requests_from(stream):  # as a stream of frames
        check_request_round_trip(request)
    try:  # as one frame's payload
        check_request_round_trip(decode_request(stream))
    except MQError:
        pass
    decode_response_or_mq_error(stream, api)


@fuzz
@given(
    api=st.sampled_from(APIS),
    version=st.integers(-2, 3) | msgpack_values,
    correlation_id=st.integers(-(1 << 32), 1 << 32) | msgpack_values,
    client_id=st.none() | st.text(max_size=300) | msgpack_values,
    data=st.data(),
)
def test_random_documents_decode_or_raise_mq_errors(
    api: Api[Any, Any], version: Any, correlation_id: Any, client_id: Any, data: st.DataObject
) -> None:
    field_names = [f.name for f in api.request.node.fields] or ["x"]
    body = data.draw(
        st.dictionaries(st.sampled_from(field_names), msgpack_values, max_size=6) | msgpack_values
    )
    payload = msgpack.packb([api.key, version, correlation_id, client_id, body])
    for request in requests_from(len(payload).to_bytes(4, "big") + payload):
        check_request_round_trip(request)
    response_body = data.draw(
        st.dictionaries(
            st.sampled_from([f.name for f in api.response.node.fields] or ["x"]),
            msgpack_values,
            max_size=6,
        )
    )
    decode_response_or_mq_error(msgpack.packb([correlation_id, 0, response_body]), api)


@fuzz
@given(api=st.sampled_from(APIS), data=st.data())
def test_valid_bodies_with_a_random_value_somewhere_decode_or_raise_mq_errors(
    api: Api[Any, Any], data: st.DataObject
) -> None:
    body = data.draw(values(api.request.node))
    places = list(slots(api.request.node, body))  # found first: edits break validity
    for slot in data.draw(st.lists(st.sampled_from(places), max_size=3)) if places else []:
        if slot.required and data.draw(st.booleans()):
            slot.container.pop(slot.key, None)
        else:
            slot.container[slot.key] = data.draw(msgpack_values)
    frame = encode_request(api, 0, 1, None, body)
    for request in requests_from(frame):
        check_request_round_trip(request)
    response = data.draw(values(api.response.node))
    places = list(slots(api.response.node, response))
    if places:
        slot = data.draw(st.sampled_from(places))
        slot.container[slot.key] = data.draw(msgpack_values)
    decode_response_or_mq_error(encode_response(1, 0, response)[4:], api)


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert", "drop", "set"]),
        st.integers(0, 1 << 16),
        st.binary(min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=4,
)


def mutate(frame: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(frame)
    for kind, where, data in edits:
        at = where % (len(out) + 1)
        if kind == "flip" and at < len(out):
            out[at] ^= data[0] or 1
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out[at:at] = data
        elif kind == "drop":
            del out[at : at + len(data)]
        elif kind == "set" and at < len(out):
            out[at] = data[0]
    return bytes(out)


@fuzz
@given(api=st.sampled_from(APIS), data=st.data(), edits=mutations)
def test_mutated_valid_frames_decode_or_raise_mq_errors(
    api: Api[Any, Any], data: st.DataObject, edits: list[tuple[str, int, bytes]]
) -> None:
    body = data.draw(values(api.request.node))
    frame = encode_request(api, 0, 1, "fuzz", body)
    for request in requests_from(mutate(frame, edits)):
        check_request_round_trip(request)
    response = encode_response(
        1, data.draw(st.sampled_from([0, 0, 16])), data.draw(values(api.response.node))
    )
    decode_response_or_mq_error(mutate(response, edits)[4:], api)
    try:
        unpack_response(mutate(response, edits)[4:])
    except MQError:
        pass

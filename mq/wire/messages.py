"""Request and response envelopes: encode to frames, decode from payloads.

Request payload: msgpack array ``[api, version, correlation_id, client_id, body]``.
Response payload: msgpack array ``[correlation_id, error_code, body]``. Bodies
are maps checked against the API's schema (:mod:`mq.wire.schema`). A response
with a non-zero error code failed as a whole; its body is ``{"message": str}``
(and ``throttle_time_ms`` when its client is throttled) and is not checked
against the API's schema.

Decoding is two steps, so a server can answer what it can answer:

1. :func:`unpack_request` / :func:`unpack_response`: msgpack with every limit
   set, and the envelope's shape and header types. A failure is a
   :class:`~mq.errors.ProtocolError`: there is no trustworthy correlation id
   to answer, so the owner closes the connection. Usable as a
   :class:`~mq.wire.frames.FrameDecoder`'s ``decode``.
2. :func:`decode_request` / :func:`decode_response`: the API, its version and
   the body. A request failure is UnsupportedVersionError (unknown API key or
   version) or InvalidRequestError (the body, with the path of the bad value),
   which the server sends back under the request's correlation id. A response
   failure is a ProtocolError: the broker sent something malformed.

Both decoders accept a payload too and then run both steps. Whatever the
input, they return or raise an :class:`~mq.errors.MQError`, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Generic, NamedTuple, TypedDict, TypeVar, cast

import msgpack

from mq.errors import (
    FrameTooLargeError,
    InvalidRequestError,
    MQError,
    ProtocolError,
    UnsupportedVersionError,
    error_for_code,
)
from mq.wire import apis as _apis  # noqa: F401  (registers every API)
from mq.wire.apis_quotas import THROTTLE_TIME_KEY
from mq.wire.frames import (
    Buffer,
    encode_counted_frame_in_pieces,
    encode_frame,
    encode_frame_parts,
    marker,
)
from mq.wire.limits import (
    FRAME_HEADER_BYTES,
    I16_MAX,
    I16_MIN,
    I32_MAX,
    I32_MIN,
    MAX_DECODED_ITEMS,
    MAX_FRAME_BYTES,
    MAX_LIST_LEN,
    MAX_MESSAGE_LEN,
    MAX_NAME_LEN,
    MAX_STRING_BYTES,
)
from mq.wire.registry import Api, api_by_key
from mq.wire.schema import ErrorMessage, Schema

ReqT = TypeVar("ReqT")
RespT = TypeVar("RespT")
Payload = bytes | bytearray | memoryview


class ErrorBody(TypedDict):
    """The body of a response whose envelope carries a non-zero error code."""

    message: ErrorMessage


_ERROR_BODY = Schema(ErrorBody)


class RequestEnvelope(NamedTuple):
    """A request whose header is sound; its body is still raw msgpack data."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: object


class Request(NamedTuple, Generic[ReqT]):
    """A decoded request: a registered API at a supported version, body validated."""

    api: Api[ReqT, Any]
    version: int
    correlation_id: int
    client_id: str | None
    body: ReqT


class ResponseEnvelope(NamedTuple):
    """A response whose header is sound; its body is still raw msgpack data."""

    correlation_id: int
    error_code: int
    body: object


class Response(NamedTuple, Generic[RespT]):
    """A decoded response: the body when error_code is 0, else the error's message."""

    correlation_id: int
    error_code: int
    body: RespT | None
    message: str | None

    @property
    def error(self) -> MQError | None:
        """The error the broker reported for the whole request, as an exception."""
        if self.error_code == 0:
            return None
        return error_for_code(self.error_code)(self.message)

    def result(self) -> RespT:
        """The body, or raise the error the broker reported."""
        error = self.error
        if error is not None:
            raise error
        return cast(RespT, self.body)


# -- encoding -------------------------------------------------------------------------------


def encode_request(
    api: Api[ReqT, Any],
    version: int,
    correlation_id: int,
    client_id: str | None,
    body: ReqT,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> bytes:
    """A whole request frame. The body is not validated here: the receiver does it.

    Raises UnsupportedVersionError for a version ``api`` does not have and
    FrameTooLargeError for a payload above ``max_frame_bytes``.
    """
    if not api.supports(version):
        raise UnsupportedVersionError(f"{api.name} has no version {version}")
    return encode_frame([api.key, version, correlation_id, client_id, body], max_frame_bytes)


LIFT_AT: Final = 8 * 1024
"""Record sets that come to this many bytes in one frame leave it uncopied
(:func:`mq.wire.frames.encode_frame_parts`); smaller frames are one buffer."""


def encode_request_parts(
    api: Api[ReqT, Any],
    version: int,
    correlation_id: int,
    client_id: str | None,
    body: ReqT,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> list[Buffer]:
    """:func:`encode_request` as buffers to write in order, the record sets of a
    produce request uncopied when they are large (:data:`LIFT_AT`)."""
    if not api.supports(version):
        raise UnsupportedVersionError(f"{api.name} has no version {version}")
    lifted_body, lifted = _lift_records(body)
    payload = [api.key, version, correlation_id, client_id, lifted_body]
    if not lifted:
        return [encode_frame(payload, max_frame_bytes)]
    return encode_frame_parts(payload, lifted, max_frame_bytes)


def encode_response_parts(
    correlation_id: int,
    error_code: int,
    body: object,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> list[Buffer]:
    """:func:`encode_response` as buffers to write in order, the record sets of a
    fetch response uncopied when they are large (:data:`LIFT_AT`)."""
    lifted_body, lifted = _lift_records(body)
    if not lifted:
        return [encode_response(correlation_id, error_code, body, max_frame_bytes)]
    parts = encode_frame_parts([correlation_id, error_code, lifted_body], lifted, max_frame_bytes)
    _check_items(sum(len(p) for p in parts), [correlation_id, error_code, body])
    return parts


def _lift_records(body: object) -> tuple[object, list[Buffer]]:
    """``body`` with every partition's ``records`` replaced by a marker, and the record
    sets in marker order, when a body of ``topics`` → ``partitions`` → ``records``
    (a produce request, a fetch response) carries at least :data:`LIFT_AT` bytes of
    them; else ``body`` as it is and no record sets. Only bodies this process
    built come here, so their shape is trusted."""
    topics = body.get("topics") if isinstance(body, dict) else None
    if not isinstance(topics, list):
        return body, []
    total = 0
    for topic in topics:
        partitions = topic.get("partitions") if isinstance(topic, dict) else None
        if not isinstance(partitions, list):  # e.g. a metadata request's topic names
            return body, []
        for part in partitions:
            records = part.get("records") if isinstance(part, dict) else None
            if isinstance(records, bytes | bytearray | memoryview):
                total += len(records)
    if total < LIFT_AT:
        return body, []
    lifted: list[Buffer] = []
    new_topics = []
    for topic in topics:
        parts = []
        for part in topic.get("partitions", ()):
            records = part.get("records")
            if isinstance(records, bytes | bytearray | memoryview) and len(records):
                part = {**part, "records": marker(len(lifted))}
                lifted.append(records)
            parts.append(part)
        new_topics.append({**topic, "partitions": parts})
    return {**cast(dict[str, Any], body), "topics": new_topics}, lifted


def encode_response(
    correlation_id: int,
    error_code: int,
    body: object,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> bytes:
    """A whole response frame (``body`` is the API's response body when error_code is 0).

    Raises FrameTooLargeError for a payload above ``max_frame_bytes`` or with
    more than MAX_DECODED_ITEMS array items and map entries: the receiver
    would refuse either. A valid request can ask for such an answer (one topic
    named 20,000 times); the server answers it with this error instead.
    """
    frame = encode_frame([correlation_id, error_code, body], max_frame_bytes)
    _check_items(len(frame), [correlation_id, error_code, body])
    return frame


def encode_big_response_parts(
    correlation_id: int,
    error_code: int,
    body: object,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> list[Buffer]:
    """:func:`encode_response_parts` for a big body, in a worker thread: the same frame,
    packed in pieces (:func:`~mq.wire.frames.encode_frame_in_pieces`) so that the
    thread does not hold the GIL for the whole packing."""
    lifted_body, lifted = _lift_records(body)
    if lifted:  # record sets (a fetch): packed as on the event loop
        return encode_response_parts(correlation_id, error_code, body, max_frame_bytes)
    payload = [correlation_id, error_code, lifted_body]
    frame, items = encode_counted_frame_in_pieces(payload, _items, max_frame_bytes)
    if items > MAX_DECODED_ITEMS:  # counted while packing: no second walk of the body
        raise _too_many_items()
    return [frame]


def _check_items(frame_size: int, payload: object) -> None:
    # every item takes at least a byte, so only a longer payload can have too many
    too_long = frame_size - FRAME_HEADER_BYTES > MAX_DECODED_ITEMS
    if too_long and _items(payload) > MAX_DECODED_ITEMS:
        raise _too_many_items()


def _too_many_items() -> FrameTooLargeError:
    return FrameTooLargeError(
        f"the response has more than {MAX_DECODED_ITEMS} array items and map entries, "
        "more than a receiver decodes: ask for fewer topics, partitions or groups"
    )


def _items(value: object) -> int:
    """Array items plus map entries in ``value``, as :func:`_unpack` counts them.

    One pass over the containers (none over the scalars) that stops a little
    past MAX_DECODED_ITEMS.
    """
    total = 0
    containers = [value]
    while containers and total <= MAX_DECODED_ITEMS:
        children = containers.pop()
        if isinstance(children, dict):
            children = children.values()
        elif not isinstance(children, list | tuple):
            continue
        total += len(children)
        containers += [c for c in children if isinstance(c, list | tuple | dict)]
    return total


def encode_error_response(correlation_id: int, error: MQError, throttle_time_ms: int = 0) -> bytes:
    """A whole response frame failing the request with ``error`` (its message truncated);
    a throttled client's carries its throttle time too, as every response to it does
    (:data:`mq.wire.apis_quotas.THROTTLE_TIME_KEY`; the error body's schema ignores it)."""
    body: dict[str, object] = {"message": error.message[:MAX_MESSAGE_LEN]}
    if throttle_time_ms > 0:
        body[THROTTLE_TIME_KEY] = throttle_time_ms
    return encode_frame([correlation_id, error.code, body])


# -- decoding -------------------------------------------------------------------------------


class _TooManyItems(ValueError):
    pass


def _unpack(payload: Payload, what: str) -> Any:
    """msgpack-decode a payload with every limit set, or raise ProtocolError."""
    size = len(payload) if not isinstance(payload, memoryview) else payload.nbytes
    # Every item takes at least a byte: a payload this short cannot break the item
    # budget, and is decoded without the counting hooks (a Python call per container,
    # two thirds of the cost of decoding a small frame).
    count = _item_counter() if size > MAX_DECODED_ITEMS else None
    try:
        return msgpack.unpackb(
            payload,
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_bin_len=size,
            max_str_len=min(size, MAX_STRING_BYTES),
            max_array_len=min(size, MAX_LIST_LEN),
            max_map_len=min(size // 2, MAX_LIST_LEN),
            max_ext_len=0,
            list_hook=count,
            object_hook=count,
        )
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        # ValueError covers msgpack's ExtraData, FormatError, StackError,
        # OutOfData, limit breaches and invalid UTF-8; TypeError an unhashable key.
        raise ProtocolError(f"malformed {what}: {type(exc).__name__}: {exc}") from exc


def _item_counter() -> Callable[[Any], Any]:
    """A msgpack hook that counts array items and map entries against the budget."""
    budget = MAX_DECODED_ITEMS

    def count(container: Any) -> Any:
        nonlocal budget
        budget -= len(container)
        if budget < 0:
            raise _TooManyItems(f"more than {MAX_DECODED_ITEMS} array items and map entries")
        return container

    return count


def _int_in(value: object, lo: int, hi: int) -> bool:
    return type(value) is int and lo <= value <= hi


def unpack_request(payload: Payload) -> RequestEnvelope:
    """Step 1: the envelope of a request payload, or ProtocolError (close the connection)."""
    obj = _unpack(payload, "request")
    if type(obj) is not list or len(obj) != 5:
        raise ProtocolError(
            "a request must be a msgpack array [api, version, correlation_id, client_id, body]"
        )
    api, version, correlation_id, client_id, body = obj
    if not _int_in(api, 0, I16_MAX):
        raise ProtocolError(f"request api key must be an int in [0, {I16_MAX}]")
    if not _int_in(version, 0, I16_MAX):
        raise ProtocolError(f"request api version must be an int in [0, {I16_MAX}]")
    if not _int_in(correlation_id, I32_MIN, I32_MAX):
        raise ProtocolError(f"correlation id must be an int in [{I32_MIN}, {I32_MAX}]")
    if client_id is not None and (type(client_id) is not str or len(client_id) > MAX_NAME_LEN):
        raise ProtocolError(f"client id must be null or a str of at most {MAX_NAME_LEN} characters")
    return RequestEnvelope(api, version, correlation_id, client_id, body)


def decode_request(payload: Payload | RequestEnvelope) -> Request[Any]:
    """Step 2 (and step 1 for a payload): the request with its body validated.

    Raises UnsupportedVersionError or InvalidRequestError, answerable with
    the envelope's correlation id (and ProtocolError from step 1).
    """
    env = payload if isinstance(payload, RequestEnvelope) else unpack_request(payload)
    api = api_by_key(env.api_key)
    if api is None:
        raise UnsupportedVersionError(
            f"unknown api key {env.api_key}; api_versions lists what this broker supports"
        )
    if not api.supports(env.version):
        raise UnsupportedVersionError(
            f"{api.name} v{env.version} is not supported; "
            f"this broker supports v{api.min_version} to v{api.max_version}"
        )
    body = api.request.validate(env.body, env.version, api.name, InvalidRequestError)
    return Request(api, env.version, env.correlation_id, env.client_id, body)


def unpack_response(payload: Payload) -> ResponseEnvelope:
    """Step 1: the envelope of a response payload, or ProtocolError (close the connection)."""
    obj = _unpack(payload, "response")
    if type(obj) is not list or len(obj) != 3:
        raise ProtocolError("a response must be a msgpack array [correlation_id, error_code, body]")
    correlation_id, error_code, body = obj
    if not _int_in(correlation_id, I32_MIN, I32_MAX):
        raise ProtocolError(f"correlation id must be an int in [{I32_MIN}, {I32_MAX}]")
    if not _int_in(error_code, I16_MIN, I16_MAX):
        raise ProtocolError(f"response error code must be an int in [{I16_MIN}, {I16_MAX}]")
    return ResponseEnvelope(correlation_id, error_code, body)


def decode_response(
    payload: Payload | ResponseEnvelope, api: Api[Any, RespT], version: int
) -> Response[RespT]:
    """Step 2 (and step 1 for a payload): the response to a request of ``api`` at ``version``.

    Raises ProtocolError if the body does not match the API's response schema.
    """
    env = payload if isinstance(payload, ResponseEnvelope) else unpack_response(payload)
    if env.error_code == 0:
        root = f"{api.name} v{version} response"
        body = api.response.validate(env.body, version, root, ProtocolError)
        return Response(env.correlation_id, 0, body, None)
    root = f"{api.name} v{version} error response"
    error_body = _ERROR_BODY.validate(env.body, 0, root, ProtocolError)
    return Response(env.correlation_id, env.error_code, None, error_body["message"])

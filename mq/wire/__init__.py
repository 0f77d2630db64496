"""Sans-IO codecs of mq's native protocol (frames, requests, responses).

Pure functions over bytes: nothing here opens a socket or runs an event loop.

* :mod:`mq.wire.frames`: 4-byte length + msgpack framing, :class:`FrameDecoder`.
* :mod:`mq.wire.messages`: request/response envelopes, two-step decoding.
* :mod:`mq.wire.schema`: body schemas declared as TypedDicts, validated per version.
* :mod:`mq.wire.registry` and :mod:`mq.wire.apis`: the API table (keys, versions).
* :mod:`mq.wire.limits`: every bound, with its reason; topic name rules.

A server reads with ``FrameDecoder(max_frame_bytes, decode=unpack_request)``,
closes the connection on :class:`~mq.errors.ProtocolError`, answers
``decode_request``'s UnsupportedVersionError / InvalidRequestError with
``encode_error_response(envelope.correlation_id, error)``, and otherwise
hands ``request.body`` (typed by the API's TypedDict) to its handler.
"""

from mq.wire.apis import RESERVED_KEYS
from mq.wire.frames import NEED_DATA, FrameDecoder, encode_frame
from mq.wire.limits import MAX_FRAME_BYTES, validate_topic_name
from mq.wire.messages import (
    Request,
    RequestEnvelope,
    Response,
    ResponseEnvelope,
    decode_request,
    decode_response,
    encode_error_response,
    encode_request,
    encode_response,
    unpack_request,
    unpack_response,
)
from mq.wire.registry import Api, all_apis, api_by_key, api_by_name

__all__ = [
    "MAX_FRAME_BYTES",
    "NEED_DATA",
    "RESERVED_KEYS",
    "Api",
    "FrameDecoder",
    "Request",
    "RequestEnvelope",
    "Response",
    "ResponseEnvelope",
    "all_apis",
    "api_by_key",
    "api_by_name",
    "decode_request",
    "decode_response",
    "encode_error_response",
    "encode_frame",
    "encode_request",
    "encode_response",
    "unpack_request",
    "unpack_response",
    "validate_topic_name",
]

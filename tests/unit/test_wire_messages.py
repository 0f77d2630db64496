"""Request/response envelopes and body schemas: round trips, rejections, errors."""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal, TypedDict

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_strategies import complete, slots, values, wrong_values

from mq import errors
from mq.errors import (
    InvalidRequestError,
    InvalidTopicError,
    MQError,
    ProtocolError,
    UnsupportedVersionError,
)
from mq.wire import apis_core, apis_data, apis_groups
from mq.wire.apis import RESERVED_KEYS
from mq.wire.frames import NEED_DATA, FrameDecoder, encode_frame
from mq.wire.limits import (
    MAX_DECODED_ITEMS,
    MAX_STRING_BYTES,
    MAX_STRING_LEN,
    validate_topic_name,
)
from mq.wire.messages import (
    decode_request,
    decode_response,
    encode_error_response,
    encode_request,
    encode_response,
    unpack_request,
    unpack_response,
)
from mq.wire.registry import Api, all_apis, api_by_key, api_by_name, define_api
from mq.wire.schema import I32, Default, Len, Range, Schema, Since

APIS = all_apis()
api_ids = [a.name for a in APIS]
big = settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])


def one_frame(frame: bytes, decoder: FrameDecoder[Any]) -> Any:
    decoder.feed(frame)
    out = decoder.next_frame()
    assert out is not NEED_DATA
    assert decoder.next_frame() is NEED_DATA
    return out


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS, ids=api_ids)
@big
@given(data=st.data())
def test_every_request_round_trips(api: Api[Any, Any], data: st.DataObject) -> None:
    body = data.draw(values(api.request.node))
    client_id = data.draw(st.none() | st.text(max_size=20))
    correlation_id = data.draw(st.integers(-(1 << 31), (1 << 31) - 1))
    expected = complete(api.request.node, body)
    frame = encode_request(api, 0, correlation_id, client_id, body)
    request = decode_request(one_frame(frame, FrameDecoder(decode=unpack_request)))
    assert request.api is api
    assert (request.version, request.correlation_id, request.client_id) == (
        0,
        correlation_id,
        client_id,
    )
    assert request.body == expected


@pytest.mark.parametrize("api", APIS, ids=api_ids)
@big
@given(data=st.data())
def test_every_response_round_trips(api: Api[Any, Any], data: st.DataObject) -> None:
    body = data.draw(values(api.response.node))
    expected = complete(api.response.node, body)
    frame = encode_response(7, 0, body)
    response = decode_response(one_frame(frame, FrameDecoder(decode=unpack_response)), api, 0)
    assert (response.correlation_id, response.error_code, response.error) == (7, 0, None)
    assert response.body == expected
    assert response.result() == expected


# -- invalid bodies are rejected with the path of the bad value ----------------------------------


@pytest.mark.parametrize("api", APIS, ids=api_ids)
@big
@given(data=st.data())
def test_a_wrong_value_anywhere_in_a_request_is_named_by_its_path(
    api: Api[Any, Any], data: st.DataObject
) -> None:
    body = data.draw(values(api.request.node))
    places = list(slots(api.request.node, body))
    if not places:  # a body with no fields at all: break its type instead
        payload = msgpack.packb([api.key, 0, 1, None, ["not", "a", "map"]])
        with pytest.raises(InvalidRequestError, match=rf"^{api.name}: expected map, got list$"):
            decode_request(payload)
        return
    slot = data.draw(st.sampled_from(places))
    slot.container[slot.key] = data.draw(st.sampled_from(wrong_values(slot.node)))
    payload = encode_request(api, 0, 1, None, body)[4:]
    with pytest.raises(InvalidRequestError) as info:
        decode_request(payload)
    assert type(info.value) is InvalidRequestError
    assert info.value.message.startswith(f"{api.name}{slot.path}: ")


@pytest.mark.parametrize("api", APIS, ids=api_ids)
@big
@given(data=st.data())
def test_a_missing_required_field_is_named(api: Api[Any, Any], data: st.DataObject) -> None:
    body = data.draw(values(api.request.node))
    required = [slot for slot in slots(api.request.node, body) if slot.required]
    if not required:
        return
    slot = data.draw(st.sampled_from(required))
    del slot.container[slot.key]
    with pytest.raises(InvalidRequestError) as info:
        decode_request(encode_request(api, 0, 1, None, body)[4:])
    assert info.value.message == f"{api.name}{slot.path}: missing"


def test_the_documented_example_path() -> None:
    body: Any = {
        "acks": 1,
        "timeout_ms": 1000,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition": 0, "records": b"a"},
                    {"partition": 1, "records": b"b"},
                    {"partition": 2, "records": "not bytes"},
                ],
            }
        ],
    }
    with pytest.raises(InvalidRequestError) as info:
        decode_request(encode_request(apis_data.PRODUCE, 0, 1, "c", body)[4:])
    assert info.value.message == (
        "produce.topics[0].partitions[2].records: expected bytes, got str"
    )


def test_map_keys_and_values_are_checked() -> None:
    body: Any = {"topics": [{"name": "t", "configs": {"retention.ms": 5}}], "timeout_ms": 1}
    body["topics"][0].update(partitions=1, replication_factor=1)
    with pytest.raises(InvalidRequestError) as info:
        decode_request(encode_request(apis_core.CREATE_TOPICS, 0, 1, None, body)[4:])
    assert info.value.message == (
        "create_topics.topics[0].configs['retention.ms']: expected str, got int"
    )
    body["topics"][0]["configs"] = {b"raw": "x"}  # msgpack allows bin keys; the schema does not
    with pytest.raises(InvalidRequestError, match=r"configs\[b'raw'\]: expected str, got bytes"):
        decode_request(encode_request(apis_core.CREATE_TOPICS, 0, 1, None, body)[4:])


def test_bool_is_not_an_int_and_int_is_not_a_bool() -> None:
    body: Any = {"acks": True, "timeout_ms": 1, "topics": []}
    with pytest.raises(InvalidRequestError, match=r"^produce\.acks: expected one of"):
        decode_request(encode_request(apis_data.PRODUCE, 0, 1, None, body)[4:])
    body = {"timeout_ms": True, "acks": 1, "topics": []}
    with pytest.raises(InvalidRequestError, match=r"^produce\.timeout_ms: expected int, got bool"):
        decode_request(encode_request(apis_data.PRODUCE, 0, 1, None, body)[4:])
    body = {"topics": None, "allow_auto_topic_creation": 1}
    with pytest.raises(InvalidRequestError, match=r"allow_auto_topic_creation: expected bool"):
        decode_request(encode_request(apis_core.METADATA, 0, 1, None, body)[4:])


def test_ranges_are_enforced() -> None:
    base: dict[str, Any] = {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1, "topics": []}
    for field, bad in (("max_wait_ms", -1), ("max_bytes", 1 << 31)):
        body: Any = dict(base, **{field: bad})
        with pytest.raises(InvalidRequestError, match=rf"^fetch\.{field}: {bad} is outside"):
            decode_request(encode_request(apis_data.FETCH, 0, 1, None, body)[4:])


def test_a_long_string_is_refused_by_the_schema_with_its_path() -> None:
    wide = "\u4e16" * (MAX_STRING_LEN + 1)  # 3 bytes each in UTF-8: through msgpack's bound
    body: Any = {"topics": [{"name": "t", "configs": {"cleanup.policy": wide}}]}
    with pytest.raises(InvalidRequestError) as info:
        decode_request(encode_request(apis_core.ALTER_CONFIGS, 0, 1, None, body)[4:])
    assert info.value.message == (
        "alter_configs.topics[0].configs['cleanup.policy']: 32768 characters long, "
        "outside [0, 32767]"
    )


def test_long_lists_are_refused_with_their_length() -> None:
    body: Any = {"states": ["Stable"] * 17}
    with pytest.raises(InvalidRequestError, match=r"^list_groups\.states: 17 items, outside"):
        decode_request(encode_request(apis_groups.LIST_GROUPS, 0, 1, None, body)[4:])


def test_unknown_keys_are_ignored_and_defaults_filled_in() -> None:
    body: Any = {"topics": ["a"], "from_the_future": [1, 2]}
    request = decode_request(encode_request(apis_core.METADATA, 0, 1, None, body)[4:])
    assert request.body["allow_auto_topic_creation"] is False
    assert request.body["from_the_future"] == [1, 2]


def test_mutable_defaults_are_not_shared() -> None:
    empty: Any = {}
    one = decode_request(encode_request(apis_groups.LIST_GROUPS, 0, 1, None, empty)[4:])
    two = decode_request(encode_request(apis_groups.LIST_GROUPS, 0, 2, None, empty)[4:])
    one.body["states"].append("Stable")
    assert two.body["states"] == []


# -- versions --------------------------------------------------------------------------------


class _Versioned(TypedDict):
    a: I32
    b: Annotated[I32, Default(-1), Since(1)]


def test_a_field_newer_than_the_version_is_ignored_and_defaulted() -> None:
    schema = Schema(_Versioned)
    assert schema.validate({"a": 1, "b": "junk"}, 0, "t") == {"a": 1, "b": -1}
    assert schema.validate({"a": 1, "b": 5}, 1, "t") == {"a": 1, "b": 5}
    assert schema.validate({"a": 1}, 1, "t") == {"a": 1, "b": -1}
    with pytest.raises(InvalidRequestError, match=r"^t\.b: expected int, got str$"):
        schema.validate({"a": 1, "b": "junk"}, 1, "t")


def test_unknown_api_and_unsupported_version_are_answerable_errors() -> None:
    unknown = msgpack.packb([999, 0, 5, "c", {}])
    envelope = unpack_request(unknown)  # the header is sound: the server can answer
    assert envelope.correlation_id == 5
    with pytest.raises(UnsupportedVersionError, match="unknown api key 999"):
        decode_request(envelope)
    too_new = msgpack.packb([apis_data.PRODUCE.key, 1, 6, "c", {}])
    with pytest.raises(UnsupportedVersionError, match=r"produce v1 is not supported.*v0 to v0"):
        decode_request(too_new)
    empty: Any = {}
    assert UnsupportedVersionError.code == 35
    with pytest.raises(UnsupportedVersionError):
        encode_request(apis_data.PRODUCE, 3, 1, None, empty)


@pytest.mark.parametrize(
    ("envelope", "match"),
    [
        ({"api": 0}, "must be a msgpack array"),
        ([0, 0, 1, None], "must be a msgpack array"),
        ([0, 0, 1, None, {}, 1], "must be a msgpack array"),
        (["produce", 0, 1, None, {}], "api key must be an int"),
        ([-1, 0, 1, None, {}], "api key must be an int"),
        ([0, True, 1, None, {}], "api version must be an int"),
        ([0, 0, 1 << 31, None, {}], "correlation id"),
        ([0, 0, 1, 5, {}], "client id"),
        ([0, 0, 1, "x" * 256, {}], "client id"),
    ],
)
def test_a_broken_request_envelope_is_a_protocol_error(envelope: Any, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode_request(msgpack.packb(envelope))


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"\xc1", "FormatError|ValueError"),  # a reserved msgpack byte
        (msgpack.packb([0, 0, 1, None, {}]) + b"\x00", "ExtraData"),
        (msgpack.packb([0, 0, 1, None, {}])[:-1], "malformed request"),
        (msgpack.packb([0, 0, 1, None, {"k": msgpack.ExtType(1, b"x")}]), "malformed request"),
        (msgpack.packb([0, 0, 1, None, {"k": "x" * (MAX_STRING_BYTES + 1)}]), "malformed"),
        (b"\x95\x00\x00\x01\xc0\x81\xa1k\xa2\xff\xfe", "malformed request"),  # invalid UTF-8
        (b"\x81\x91\x00\x00", "malformed request"),  # a list as a map key
    ],
)
def test_malformed_msgpack_is_a_protocol_error(payload: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        unpack_request(payload)


def test_too_many_decoded_items_is_a_protocol_error() -> None:
    side = int(MAX_DECODED_ITEMS**0.5) + 1
    flood = msgpack.packb([0, 0, 1, None, {"x": [[None] * side] * side}])
    assert len(flood) < MAX_DECODED_ITEMS * 2  # small on the wire, big in memory
    with pytest.raises(ProtocolError, match="array items and map entries"):
        unpack_request(flood)


def test_a_response_with_more_items_than_a_receiver_decodes_is_not_encoded() -> None:
    # found by tests/fuzz/test_broker_fuzz.py: describe_configs naming one topic
    # 20,000 times got an answer of 1.2 million items, which no client decodes
    side = int(MAX_DECODED_ITEMS**0.5) + 1
    with pytest.raises(ProtocolError, match="array items and map entries"):
        encode_response(1, 0, {"x": [[None] * side] * side})
    fits = {"x": [[None] * (side - 2)] * (side - 2)}
    assert unpack_response(encode_response(1, 0, fits)[4:]).body == fits


def test_a_huge_array_header_is_refused_before_reading_items() -> None:
    payload = b"\x95\x00\x00\x01\xc0" + b"\xdd\xff\xff\xff\xff"  # body: array32 of 2**32-1
    with pytest.raises(ProtocolError, match="malformed request"):
        unpack_request(payload)


# -- responses --------------------------------------------------------------------------------


def test_an_error_response_carries_code_and_message() -> None:
    frame = encode_error_response(9, errors.NotCoordinatorError("group g moved to broker 2"))
    response = decode_response(frame[4:], apis_groups.HEARTBEAT, 0)
    assert (response.correlation_id, response.error_code, response.body) == (9, 16, None)
    assert isinstance(response.error, errors.NotCoordinatorError)
    assert response.error.retriable
    with pytest.raises(errors.NotCoordinatorError, match="moved to broker 2"):
        response.result()


def test_an_error_response_may_carry_a_throttle_time() -> None:
    """A throttled client's error responses carry its throttle time (issue 20): the error
    decodes as before (the key is not in the error body's schema), the time is there
    for the client's connection to honour; an unthrottled error has no such key."""
    frame = encode_error_response(9, errors.InvalidRequestError("bad"), throttle_time_ms=120)
    envelope = unpack_response(frame[4:])
    assert envelope.body == {"message": "bad", "throttle_time_ms": 120}
    response = decode_response(envelope, apis_groups.HEARTBEAT, 0)
    assert isinstance(response.error, errors.InvalidRequestError)
    assert response.message == "bad"
    plain = unpack_response(encode_error_response(9, errors.InvalidRequestError("bad"))[4:])
    assert plain.body == {"message": "bad"}


def test_an_unknown_error_code_maps_to_the_base_error() -> None:
    response = decode_response(encode_response(1, 31_000, {})[4:], apis_groups.HEARTBEAT, 0)
    assert type(response.error) is MQError


def test_a_malformed_response_body_is_a_protocol_error_with_a_path() -> None:
    body = {"generation_id": 1, "assignment": {"t": [0, -1]}, "revoke": {}}
    body["heartbeat_interval_ms"] = 3000
    frame = encode_response(1, 0, body)
    with pytest.raises(ProtocolError) as info:
        decode_response(frame[4:], apis_groups.HEARTBEAT, 0)
    assert info.value.message == (
        "heartbeat v0 response.assignment['t'][1]: -1 is outside [0, 2147483647]"
    )
    with pytest.raises(ProtocolError, match=r"error response\.message: expected str"):
        decode_response(encode_response(1, 16, {"message": 5})[4:], apis_groups.HEARTBEAT, 0)


@pytest.mark.parametrize(
    "envelope", [[1, 0], [1, 0, {}, 3], ["1", 0, {}], [1, 1 << 15, {}], [1, None, {}]]
)
def test_a_broken_response_envelope_is_a_protocol_error(envelope: Any) -> None:
    with pytest.raises(ProtocolError):
        unpack_response(msgpack.packb(envelope))


# -- the API table ---------------------------------------------------------------------------


def test_api_versions_answers_from_the_registry() -> None:
    body = apis_core.api_versions_body()
    response = decode_response(
        encode_response(1, 0, copy.deepcopy(body))[4:], apis_core.API_VERSIONS, 0
    )
    assert response.body == body
    listed = {a["name"]: (a["key"], a["min_version"], a["max_version"]) for a in body["apis"]}
    assert listed == {a.name: (a.key, a.min_version, a.max_version) for a in all_apis()}
    assert listed["api_versions"] == (18, 0, 0)
    assert listed["authenticate"][0] == 36


def test_the_apis_the_broker_needs_are_defined() -> None:
    wanted = {
        "api_versions": 18,
        "authenticate": 36,
        "metadata": 3,
        "create_topics": 19,
        "delete_topics": 20,
        "describe_configs": 32,
        "alter_configs": 33,
        "produce": 0,
        "fetch": 1,
        "list_offsets": 2,
        "init_producer_id": 22,
        "find_coordinator": 10,
        "join_group": 11,
        "heartbeat": 12,
        "leave_group": 13,
        "offset_commit": 8,
        "offset_fetch": 9,
        "list_groups": 16,
        "describe_groups": 15,
        "delete_records": 21,
        "elect_leaders": 43,
        "alter_partition_reassignments": 45,
        "list_partition_reassignments": 46,
        "replica_fetch": 1000,
        "internal_append": 1001,
        "broker_hello": 1002,
        "queue_receive": 1010,
        "queue_ack": 1011,
        "describe_queue": 1012,
        "describe_client_quotas": 48,
        "alter_client_quotas": 49,
        "describe_user_scram_credentials": 50,
        "alter_user_scram_credentials": 51,
        "describe_acls": 29,
        "create_acls": 30,
        "delete_acls": 31,
        "describe_producers": 61,
    }
    assert {a.name: a.key for a in all_apis()} == wanted
    for name, key in wanted.items():
        assert api_by_name(name) is api_by_key(key)
    assert not set(RESERVED_KEYS) & set(wanted.values())


def test_an_api_key_or_name_cannot_be_taken_twice() -> None:
    with pytest.raises(ValueError, match="taken"):
        define_api(0, "produce_again", _Versioned, _Versioned)
    with pytest.raises(ValueError, match="taken"):
        define_api(999, "produce", _Versioned, _Versioned)
    assert api_by_key(999) is None


class _NoRange(TypedDict):
    a: int


class _NoLen(TypedDict):
    a: list[I32]


class _SinceWithoutDefault(TypedDict):
    a: Annotated[I32, Since(1)]


class _BadDefault(TypedDict):
    a: Annotated[int, Range(0, 10), Default(11)]


class _SharedDefault(TypedDict):
    a: Annotated[list[I32], Len(0, 5), Default([1])]


class _DefaultInside(TypedDict):
    a: Annotated[list[Annotated[I32, Default(1)]], Len(0, 5)]


class _Literal(TypedDict):
    a: Literal[b"x"]


@pytest.mark.parametrize(
    ("typed_dict", "match"),
    [
        (_NoRange, "needs a Range"),
        (_NoLen, "needs a Len"),
        (_SinceWithoutDefault, "needs a Default"),
        (_BadDefault, "bad Default"),
        (_SharedDefault, "mutable Default must be empty"),
        (_DefaultInside, "belong on fields"),
        (_Literal, "Literal values"),
    ],
)
def test_schema_mistakes_fail_at_definition(typed_dict: type, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        Schema(typed_dict)


# -- errors and names -----------------------------------------------------------------------------


def test_group_and_protocol_error_codes_are_kafkas() -> None:
    expected = {
        "COORDINATOR_NOT_AVAILABLE": 15,
        "NOT_COORDINATOR": 16,
        "ILLEGAL_GENERATION": 22,
        "UNKNOWN_MEMBER_ID": 25,
        "INVALID_SESSION_TIMEOUT": 26,
        "REBALANCE_IN_PROGRESS": 27,
        "GROUP_ID_NOT_FOUND": 69,
        "FENCED_INSTANCE_ID": 82,
        "UNSUPPORTED_VERSION": 35,
        "INVALID_REQUEST": 42,
        "NOT_LEADER_OR_FOLLOWER": 6,
        "SASL_AUTHENTICATION_FAILED": 58,
    }
    by_name = {cls.name: code for code, cls in errors.all_errors().items()}
    assert {name: by_name[name] for name in expected} == expected
    assert errors.error_for_code(27).retriable
    assert not errors.error_for_code(22).retriable


@pytest.mark.parametrize("name", ["a", "events", "a.b_c-D9", "x" * 249])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("", "empty"),
        (".", "cannot be"),
        ("..", "cannot be"),
        ("x" * 250, "250 characters"),
        ("a b", "characters other than"),
        ("a/b", "characters other than"),
        ("é", "characters other than"),
        ("a\n", "characters other than"),
    ],
)
def test_illegal_topic_names(name: str, match: str) -> None:
    with pytest.raises(InvalidTopicError, match=match):
        validate_topic_name(name)


def test_encode_frame_of_a_request_matches_encode_request() -> None:
    body: Any = {"key": "g"}
    frame = encode_request(apis_groups.FIND_COORDINATOR, 0, 3, "c", body)
    assert frame == encode_frame([10, 0, 3, "c", {"key": "g"}])


def test_describe_producers_epoch_start_offset_is_optional_both_ways() -> None:
    """Issue 23's ``epoch_start_offset``: a broker that predates it answers without it
    (the client reads -1: unknown); an older client ignores it."""
    from mq.wire.apis_data import DESCRIBE_PRODUCERS

    state = {"producer_id": 7, "producer_epoch": 1, "last_sequence": 4, "last_timestamp": 9}
    old = {"topics": [{"name": "t", "partitions": [
        {"partition": 0, "error": 0, "message": None, "producers": [dict(state)]}
    ]}]}  # fmt: skip
    body = DESCRIBE_PRODUCERS.response.validate(old, 0, "describe_producers")
    assert body["topics"][0]["partitions"][0]["producers"][0]["epoch_start_offset"] == -1
    new = {**state, "epoch_start_offset": 40}
    old["topics"][0]["partitions"][0]["producers"] = [new]  # type: ignore[index]
    body = DESCRIBE_PRODUCERS.response.validate(old, 0, "describe_producers")
    assert body["topics"][0]["partitions"][0]["producers"][0]["epoch_start_offset"] == 40

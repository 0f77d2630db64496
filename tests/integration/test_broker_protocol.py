"""The broker over its wire protocol, with a raw socket client (no client library).

Each test talks to a real ``mq serve`` process on loopback (see conftest.py).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from broker_process import BrokerProcess

from mq.errors import InvalidRequestError, TopicAuthorizationFailedError
from mq.records.records import build_batch, decode_records
from mq.wire import apis_core, apis_data, apis_groups
from mq.wire.frames import FrameDecoder
from mq.wire.messages import decode_response, encode_request, unpack_response
from mq.wire.registry import Api

TIMEOUT_S = 10.0


class Raw:
    """A blocking connection that sends requests and reads responses by correlation id."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.decoder: FrameDecoder[bytes] = FrameDecoder()
        self.cid = 0
        self.apis: dict[int, Api[Any, Any]] = {}

    def send(self, api: Api[Any, Any], body: Any) -> int:
        self.cid += 1
        self.apis[self.cid] = api
        self.sock.sendall(encode_request(api, 0, self.cid, "raw-test", body))
        return self.cid

    def receive(self) -> tuple[int, Any]:
        """The next response: (correlation id, body); raises the broker's error."""
        while True:
            for payload in self.decoder.frames():
                envelope = unpack_response(payload)
                api = self.apis.pop(envelope.correlation_id)
                return envelope.correlation_id, decode_response(envelope, api, 0).result()
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.decoder.feed(data)

    def call(self, api: Api[Any, Any], body: Any) -> Any:
        cid = self.send(api, body)
        got, result = self.receive()
        assert got == cid
        return result

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def batch(values: list[bytes]) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(None, v, [], now) for v in values])


def produce_body(topic: str, partition: int, records: bytes, acks: int = -1) -> Any:
    return {
        "acks": acks,
        "timeout_ms": 5000,
        "topics": [{"name": topic, "partitions": [{"partition": partition, "records": records}]}],
    }


def fetch_body(topic: str, partition: int, offset: int, wait_ms: int = 0) -> Any:
    return {
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }


def read_all(raw: Raw, topic: str, partition: int) -> list[bytes | None]:
    values: list[bytes | None] = []
    offset = 0
    while True:
        part = raw.call(apis_data.FETCH, fetch_body(topic, partition, offset))["topics"][0][
            "partitions"
        ][0]
        assert part["error"] == 0, part
        if not part["records"]:
            return values
        data, pos = part["records"], 0
        while pos < len(data):
            size = struct.unpack_from(">i", data, pos + 8)[0] + 12
            records = decode_records(data[pos : pos + size])
            values.extend(r.value for r in records if r.offset >= offset)
            pos += size
        offset = part["high_watermark"] if pos else offset
        offset = max(offset, len(values))


def create(raw: Raw, topic: str, partitions: int = 1, **configs: str) -> None:
    body = {
        "topics": [
            {"name": topic, "partitions": partitions, "replication_factor": 1, "configs": configs}
        ],
        "timeout_ms": 1000,
    }
    result = raw.call(apis_core.CREATE_TOPICS, body)["topics"][0]
    assert result["error"] == 0, result


@pytest.fixture
def raw(bootstrap: str) -> Any:
    connection = Raw(bootstrap)
    yield connection
    connection.close()


def test_produce_and_fetch_round_trip_for_each_acks_level(raw: Raw) -> None:
    create(raw, "round-trip")
    for acks, word in ((-1, b"all"), (1, b"leader")):
        result = raw.call(apis_data.PRODUCE, produce_body("round-trip", 0, batch([word]), acks))
        assert result["topics"][0]["partitions"][0]["error"] == 0
    raw.send(apis_data.PRODUCE, produce_body("round-trip", 0, batch([b"none"]), acks=0))
    raw.apis.pop(raw.cid)  # acks=0: no response will come
    # the next answer is api_versions': nothing was sent back for the acks=0 produce
    served = {api["name"] for api in raw.call(apis_core.API_VERSIONS, {})["apis"]}
    assert {"produce", "fetch", "heartbeat", "init_producer_id"} <= served
    assert "authenticate" in served  # issue 19: SASL listeners use it
    deadline = time.monotonic() + TIMEOUT_S
    while (values := read_all(raw, "round-trip", 0)) != [b"all", b"leader", b"none"]:
        assert time.monotonic() < deadline, values


def test_pipelined_produces_on_one_connection_append_in_order(raw: Raw) -> None:
    create(raw, "pipelined")
    sent = [
        raw.send(apis_data.PRODUCE, produce_body("pipelined", 0, batch([b"%d" % i])))
        for i in range(50)
    ]
    offsets = {}
    for _ in sent:
        cid, result = raw.receive()
        offsets[cid] = result["topics"][0]["partitions"][0]["base_offset"]
    assert [offsets[cid] for cid in sent] == list(range(50))
    assert read_all(raw, "pipelined", 0) == [b"%d" % i for i in range(50)]


def test_a_long_poll_returns_when_data_arrives_and_does_not_block_produce(bootstrap: str) -> None:
    poller, producer = Raw(bootstrap), Raw(bootstrap)
    try:
        create(producer, "long-poll")
        started = time.monotonic()
        cid = poller.send(apis_data.FETCH, fetch_body("long-poll", 0, 0, wait_ms=8000))
        time.sleep(0.3)
        producer.call(apis_data.PRODUCE, produce_body("long-poll", 0, batch([b"wake"])))
        got, result = poller.receive()
        elapsed = time.monotonic() - started
        assert got == cid
        assert result["topics"][0]["partitions"][0]["records"]
        assert elapsed < 5.0  # well before max_wait_ms
    finally:
        poller.close()
        producer.close()


def test_a_long_poll_is_answered_before_the_produce_that_woke_it(bootstrap: str) -> None:
    # end-to-end latency: the consumer's records do not wait behind the producer's ack;
    # on one connection the order of the two responses is the order of the broker's writes
    with Raw(bootstrap) as raw:
        create(raw, "answered-first")
        fetch = raw.send(apis_data.FETCH, fetch_body("answered-first", 0, 0, wait_ms=8000))
        # answered after the fetch's handler ran (a connection's requests start in order):
        # from here on the fetch is parked on the broker
        assert raw.call(apis_core.API_VERSIONS, {})["apis"]
        produce = raw.send(apis_data.PRODUCE, produce_body("answered-first", 0, batch([b"wake"])))
        first, result = raw.receive()
        assert first == fetch, "the produce was acknowledged before the long poll it woke"
        assert decode_records(result["topics"][0]["partitions"][0]["records"])[0].value == b"wake"
        second, result = raw.receive()
        assert second == produce
        assert result["topics"][0]["partitions"][0]["base_offset"] == 0


def test_bad_input_gets_errors_and_the_broker_keeps_serving(bootstrap: str) -> None:
    with Raw(bootstrap) as good:
        _bad_input_is_refused(good)


def _bad_input_is_refused(good: Raw) -> None:
    create(good, "survives")
    good.call(apis_data.PRODUCE, produce_body("survives", 0, batch([b"kept"])))
    # an invalid body is answered with an error under its correlation id
    with pytest.raises(Exception, match="produce"):
        good.call(apis_data.PRODUCE, {"acks": 7, "timeout_ms": 1, "topics": []})
    # a corrupt batch fails its partition only
    damaged = bytearray(batch([b"x"]))
    damaged[-1] ^= 0xFF
    result = good.call(apis_data.PRODUCE, produce_body("survives", 0, bytes(damaged)))
    assert result["topics"][0]["partitions"][0]["error"] == 2  # CORRUPT_MESSAGE
    for junk in (
        b"\x7f\xff\xff\xff",  # announces a 2 GiB frame
        b"\x00\x00\x00\x03\xc1\xc1\xc1",  # not msgpack
        b"\x00\x00\x00\x02\x92\x01",  # an envelope of the wrong shape
    ):
        bad = socket.create_connection(good.sock.getpeername()[:2], timeout=TIMEOUT_S)
        bad.sendall(junk)
        assert bad.recv(100) == b""  # closed, not crashed
        bad.close()
    assert read_all(good, "survives", 0) == [b"kept"]


def test_topics_metadata_and_configs(raw: Raw) -> None:
    create(raw, "admin-a", partitions=3, **{"retention.ms": "3600000"})
    again = raw.call(
        apis_core.CREATE_TOPICS,
        {
            "topics": [{"name": "admin-a", "partitions": 1, "replication_factor": 1}],
            "timeout_ms": 1,
        },
    )
    assert again["topics"][0]["error"] == 36  # TOPIC_ALREADY_EXISTS
    meta = raw.call(apis_core.METADATA, {"topics": ["admin-a"]})
    assert [p["partition"] for p in meta["topics"][0]["partitions"]] == [0, 1, 2]
    altered = raw.call(
        apis_core.ALTER_CONFIGS,
        {"topics": [{"name": "admin-a", "configs": {"segment.bytes": "4194304"}}]},
    )
    assert altered["topics"][0]["error"] == 0, altered
    described = raw.call(apis_core.DESCRIBE_CONFIGS, {"topics": [{"name": "admin-a"}]})
    configs = {c["name"]: c for c in described["topics"][0]["configs"]}
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["segment.bytes"]["value"] == "4194304"
    assert configs["flush"]["is_default"]
    bad = raw.call(
        apis_core.ALTER_CONFIGS, {"topics": [{"name": "admin-a", "configs": {"nope": "1"}}]}
    )
    assert bad["topics"][0]["error"] == 40  # INVALID_CONFIG
    assert (
        raw.call(apis_core.DELETE_TOPICS, {"topics": ["admin-a"], "timeout_ms": 1})["topics"][0][
            "error"
        ]
        == 0
    )
    gone = raw.call(apis_core.METADATA, {"topics": ["admin-a"]})
    assert gone["topics"][0]["error"] == 3  # UNKNOWN_TOPIC_OR_PARTITION


def _join(raw: Raw, group: str, topic: str) -> str:
    joined = raw.call(
        apis_groups.JOIN_GROUP,
        {
            "group_id": group,
            "member_id": "",
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 5_000,
            "topics": [topic],
            "assignor": "range",
        },
    )
    member: str = joined["member_id"]
    return member


def _beat(raw: Raw, group: str, member: str, owned: dict[str, list[int]]) -> Any:
    return raw.call(
        apis_groups.HEARTBEAT,
        {"group_id": group, "member_id": member, "generation_id": 0, "owned": owned},
    )


def _beat_until(
    raw: Raw, group: str, member: str, owned: dict[str, list[int]], done: Callable[[Any], bool]
) -> Any:
    """Heartbeat (as a client does, every 50 ms here) until ``done(response)``: the
    coordinator recomputes a changed group's assignment on its next tick."""
    for _ in range(100):
        response = _beat(raw, group, member, owned)
        if done(response):
            return response
        time.sleep(0.05)
    raise AssertionError(f"no such heartbeat answer in 5 s: {response}")


def test_a_group_splits_partitions_cooperatively_and_offsets_survive_a_restart(
    own_broker: BrokerProcess,
) -> None:
    with Raw(own_broker.bootstrap) as raw:
        create(raw, "grouped", partitions=4)
        first = _join(raw, "g", "grouped")
        owned_first = _beat_until(raw, "g", first, {}, lambda r: r["assignment"])["assignment"]
        assert owned_first == {"grouped": [0, 1, 2, 3]}
        second = _join(raw, "g", "grouped")
        assert _beat(raw, "g", second, {})["assignment"] == {}  # not before the first revokes
        told = _beat_until(raw, "g", first, owned_first, lambda r: r["revoke"])
        kept, revoked = told["assignment"]["grouped"], told["revoke"]["grouped"]
        # range splits 2 + 2 (which half depends on the member ids); the first
        # member keeps consuming its half throughout, and gives up the other
        assert len(kept) == len(revoked) == 2
        assert sorted(kept + revoked) == [0, 1, 2, 3]
        _beat(raw, "g", first, told["assignment"])
        got = _beat_until(raw, "g", second, {}, lambda r: r["assignment"])
        assert got["assignment"] == {"grouped": revoked}
        commit = {
            "group_id": "g",
            "generation_id": 2,
            "member_id": first,
            "topics": [{"name": "grouped", "partitions": [{"partition": kept[0], "offset": 42}]}],
        }
        committed = raw.call(apis_groups.OFFSET_COMMIT, commit)
        assert committed["topics"][0]["partitions"][0]["error"] == 0
    own_broker.restart()
    with Raw(own_broker.bootstrap) as raw:
        fetched = raw.call(apis_groups.OFFSET_FETCH, {"group_id": "g"})
    assert fetched["topics"][0]["partitions"][0]["offset"] == 42


def test_kill_9_during_production_loses_no_acknowledged_message(own_broker: BrokerProcess) -> None:
    with Raw(own_broker.bootstrap) as raw:
        create(raw, "crashy")
    acked: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        conn = Raw(own_broker.bootstrap)
        try:
            for i in range(100_000):
                if stop.is_set():
                    return
                value = b"m%06d" % i
                result = conn.call(apis_data.PRODUCE, produce_body("crashy", 0, batch([value])))
                if result["topics"][0]["partitions"][0]["error"] == 0:
                    acked.append(value)
        except (OSError, ConnectionError):
            return  # the broker died under us
        finally:
            conn.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    deadline = time.monotonic() + TIMEOUT_S
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    own_broker.kill()
    stop.set()
    producer.join(TIMEOUT_S)
    assert len(acked) >= 300
    own_broker.start()
    with Raw(own_broker.bootstrap) as raw:
        stored = read_all(raw, "crashy", 0)
    assert stored[: len(acked)] == acked  # every acknowledged message, in order


def test_an_idempotent_producer_cut_off_before_the_response_writes_no_duplicate(
    own_broker: BrokerProcess,
) -> None:
    with Raw(own_broker.bootstrap) as raw:
        create(raw, "exactly-once")
        ids = raw.call(apis_data.INIT_PRODUCER_ID, {})
        pid, epoch = ids["producer_id"], ids["producer_epoch"]
        assert pid >= 0
        assert raw.call(apis_data.INIT_PRODUCER_ID, {})["producer_id"] != pid
        now = int(time.time() * 1000)
        first = build_batch(
            [(None, b"one", [], now)], producer_id=pid, producer_epoch=epoch, base_sequence=0
        )
        stored = raw.call(apis_data.PRODUCE, produce_body("exactly-once", 0, first))
        assert stored["topics"][0]["partitions"][0]["error"] == 0, stored
        second = build_batch(
            [(None, b"two", [], now)], producer_id=pid, producer_epoch=epoch, base_sequence=1
        )
    # send the second batch and drop the connection before reading the response
    cut = Raw(own_broker.bootstrap)
    cut.send(apis_data.PRODUCE, produce_body("exactly-once", 0, second))
    cut.close()
    time.sleep(0.2)
    own_broker.kill()  # and the broker crashes too: the state must be rebuilt
    own_broker.start()
    with Raw(own_broker.bootstrap) as raw:
        retried = raw.call(apis_data.PRODUCE, produce_body("exactly-once", 0, second))
        assert retried["topics"][0]["partitions"][0]["base_offset"] == 1, retried
        assert read_all(raw, "exactly-once", 0) == [b"one", b"two"]


def test_fetch_max_bytes_caps_the_whole_response_after_the_first_partition(raw: Raw) -> None:
    create(raw, "budget", partitions=3)
    for partition in range(3):
        raw.call(apis_data.PRODUCE, produce_body("budget", partition, batch([bytes(1000)])))
    body = fetch_body("budget", 0, 0)
    body["max_bytes"] = 100  # smaller than one batch
    body["topics"][0]["partitions"] = [
        {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for p in range(3)
    ]
    parts = raw.call(apis_data.FETCH, body)["topics"][0]["partitions"]
    sizes = [len(p["records"]) for p in parts]
    assert sizes[0] > 1000  # the first partition with data gets its whole batch anyway
    assert sizes[1:] == [0, 0]  # the others wait for the next fetch
    assert [p["high_watermark"] for p in parts] == [1, 1, 1]  # known even when skipped


def test_a_topic_recreated_while_it_is_being_deleted_does_not_share_its_files(
    own_broker: BrokerProcess,
) -> None:
    # found by tests/fuzz/test_broker_fuzz.py: a produce that auto-created the
    # topic while delete_topics was closing it opened the doomed files a second
    # time; the old log's close then cut them short under the new one's map (SIGBUS)
    with Raw(own_broker.bootstrap) as raw:
        create(raw, "churn")
        raw.call(apis_data.PRODUCE, produce_body("churn", 0, batch([b"old"])))
        deleting, producing = raw.cid + 1, raw.cid + 2
        raw.apis.update({deleting: apis_core.DELETE_TOPICS, producing: apis_data.PRODUCE})
        raw.cid += 2
        delete = {"topics": ["churn"], "timeout_ms": 1000}
        produce = produce_body("churn", 0, batch([b"new"]))
        # in one segment, so the broker dispatches the produce while the delete is under way
        raw.sock.sendall(
            encode_request(apis_core.DELETE_TOPICS, 0, deleting, "raw-test", delete)
            + encode_request(apis_data.PRODUCE, 0, producing, "raw-test", produce)
        )
        answers = dict(raw.receive() for _ in range(2))
        assert answers[deleting]["topics"][0]["error"] == 0
        produced = answers[producing]["topics"][0]["partitions"][0]
        # appended to the doomed log before its partition stopped (offset 1, deleted with
        # it), to the topic created again after the deletion (offset 0), or refused
        if produced["error"] == 0:
            assert produced["base_offset"] in (0, 1), produced
        for i in range(20):
            raw.call(apis_data.PRODUCE, produce_body("churn", 0, batch([b"%d" % i] * 100)))
        values = read_all(raw, "churn", 0)
        assert values[-1] == b"19"
        assert b"old" not in values  # nothing of the deleted log in the new one
        assert values.count(b"new") <= 1
    assert own_broker.proc is not None
    assert own_broker.proc.poll() is None, own_broker.output[-20:]


def test_a_member_id_fits_its_field_whatever_the_client_id(raw: Raw) -> None:
    # found by tests/fuzz/test_broker_fuzz.py: the member id is the client id and a
    # suffix, and a 255-character client id made it too long for the response schema
    join = {
        "group_id": "long-client",
        "member_id": "",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 5_000,
        "topics": ["long-client"],
        "assignor": "range",
    }
    raw.cid += 1
    raw.sock.sendall(encode_request(apis_groups.JOIN_GROUP, 0, raw.cid, "c" * 255, join))
    raw.apis[raw.cid] = apis_groups.JOIN_GROUP
    _, joined = raw.receive()  # decode_response checks the body against the schema
    assert joined["member_id"].startswith("ccc")
    described = raw.call(apis_groups.DESCRIBE_GROUPS, {"groups": ["long-client"]})
    assert described["groups"][0]["members"][0]["member_id"] == joined["member_id"]


def test_a_request_whose_answer_no_client_could_decode_gets_an_error(raw: Raw) -> None:
    # found by tests/fuzz/test_broker_fuzz.py: one topic named 20,000 times in a
    # valid describe_configs request made an answer of more than a million items
    create(raw, "echoed")
    # since issue 18 (F5) a topic named twice is refused per entry (INVALID_REQUEST),
    # so the answer stays small
    body = {"topics": [{"name": "echoed"}] * 20_000}
    answer = raw.call(apis_core.DESCRIBE_CONFIGS, body)["topics"]
    assert len(answer) == 20_000
    assert {t["error"] for t in answer} == {InvalidRequestError.code}
    assert all(not t["configs"] for t in answer)
    assert raw.call(apis_core.DESCRIBE_CONFIGS, {"topics": [{"name": "echoed"}]})["topics"]


def test_a_topic_deleted_under_a_produce_does_not_fail_the_other_topics(raw: Raw) -> None:
    # found by tests/fuzz/test_broker_fuzz.py: the produce looked its partitions up
    # again after the appends, and one deleted meanwhile failed the whole request,
    # so a client was told its append to the other topic failed although it was stored
    create(raw, "stays")
    create(raw, "goes")
    produce = {
        "acks": -1,
        "timeout_ms": 5000,
        "topics": [
            {"name": "stays", "partitions": [{"partition": 0, "records": batch([b"kept"])}]},
            {"name": "goes", "partitions": [{"partition": 0, "records": batch([b"lost"])}]},
        ],
    }
    producing, deleting = raw.cid + 1, raw.cid + 2
    raw.apis.update({producing: apis_data.PRODUCE, deleting: apis_core.DELETE_TOPICS})
    raw.cid += 2
    # in one segment, so the topic is deleted while the produce waits for its appends
    raw.sock.sendall(
        encode_request(apis_data.PRODUCE, 0, producing, "raw-test", produce)
        + encode_request(
            apis_core.DELETE_TOPICS, 0, deleting, "raw-test", {"topics": ["goes"], "timeout_ms": 1}
        )
    )
    answers = dict(raw.receive() for _ in range(2))
    stays = answers[producing]["topics"][0]["partitions"][0]
    assert (stays["error"], stays["base_offset"]) == (0, 0), stays
    assert read_all(raw, "stays", 0) == [b"kept"]


def test_clients_cannot_write_to_the_offsets_topic(own_broker: BrokerProcess) -> None:
    # found by tests/fuzz/test_broker_fuzz.py: any record produced to
    # __consumer_offsets was stored, and the broker could not start again
    # ("bad record in __consumer_offsets"); Kafka refuses appends to internal topics
    junk = build_batch([(b"not a commit key", b"junk", [], int(time.time() * 1000))])
    with Raw(own_broker.bootstrap) as raw:
        for partition in range(3):
            result = raw.call(
                apis_data.PRODUCE, produce_body("__consumer_offsets", partition, junk)
            )["topics"][0]["partitions"][0]
            assert result["error"] == 17, result  # INVALID_TOPIC_EXCEPTION
    own_broker.restart()
    with Raw(own_broker.bootstrap) as raw:
        assert raw.call(apis_groups.OFFSET_FETCH, {"group_id": "nobody"})["topics"] == []


def test_the_offsets_topic_cannot_be_deleted_or_cut(broker: BrokerProcess) -> None:
    # refused at the gate (mq.broker.gate): an internal topic is the brokers' alone
    with Raw(broker.bootstrap) as raw:
        with pytest.raises(TopicAuthorizationFailedError):
            raw.call(apis_core.DELETE_TOPICS, {"topics": ["__consumer_offsets"], "timeout_ms": 1})
        cut = {"partition": 0, "offset": -1}
        body = {"topics": [{"name": "__consumer_offsets", "partitions": [cut]}], "timeout_ms": 1}
        with pytest.raises(TopicAuthorizationFailedError):
            raw.call(apis_core.DELETE_RECORDS, body)
        names = [t["name"] for t in raw.call(apis_core.METADATA, {"topics": None})["topics"]]
        assert "__consumer_offsets" in names

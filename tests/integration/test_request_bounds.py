"""Per-request work on a live broker (issue 18, F5): a request naming one entry many
times is refused or merged, never done many times; a request naming many topics
writes the metadata once.

Each test talks to a real ``mq serve`` process on loopback (see conftest.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from broker_process import BrokerProcess

from mq.client.connection import Connection
from mq.errors import InvalidRequestError
from mq.records.records import build_batch
from mq.wire import apis_core, apis_data, apis_groups, apis_queues

REPEATS = 2_000
"""Entries naming the same partition or topic: enough to show work done per entry,
small enough to keep the test quick on today's code too."""


async def _connect(broker: BrokerProcess) -> Connection:
    host, port = broker.bootstrap.rsplit(":", 1)
    return await Connection.open(host, int(port), client_id="bounds-test")


async def _create(conn: Connection, *names: str, partitions: int = 1) -> None:
    body = {
        "topics": [
            {"name": n, "partitions": partitions, "replication_factor": 1, "configs": {}}
            for n in names
        ],
        "timeout_ms": 10_000,
    }
    answer = await conn.call(apis_core.CREATE_TOPICS, body)
    assert [t["error"] for t in answer["topics"]] == [0] * len(names), answer


def _batch(value: bytes) -> bytes:
    return build_batch([(None, value, [], int(time.time() * 1000))])


async def test_a_produce_naming_a_partition_twice_appends_neither(broker: BrokerProcess) -> None:
    conn = await _connect(broker)
    try:
        await _create(conn, "dup-produce")
        partitions: list[Any] = [{"partition": 0, "records": _batch(b"x")}] * REPEATS
        partitions.append({"partition": 1, "records": _batch(b"y")})  # no such partition
        body = {
            "acks": 1,
            "timeout_ms": 5000,
            "topics": [{"name": "dup-produce", "partitions": partitions}],
        }
        answer = await conn.call(apis_data.PRODUCE, body)
        results = answer["topics"][0]["partitions"]
        assert len(results) == REPEATS + 1
        assert {r["error"] for r in results[:REPEATS]} == {InvalidRequestError.code}
        assert "dup-produce-0 appears more than once" in results[0]["message"]
        assert results[REPEATS]["error"] != 0  # partition 1 does not exist: its own error
        offsets = await conn.call(
            apis_data.LIST_OFFSETS,
            {
                "topics": [
                    {
                        "name": "dup-produce",
                        "partitions": [
                            {"partition": 0, "timestamp": -1, "current_leader_epoch": -1}
                        ],
                    }
                ]
            },
        )
        assert offsets["topics"][0]["partitions"][0]["offset"] == 0  # nothing appended
        # one entry per partition is appended as usual
        body["topics"][0]["partitions"] = [{"partition": 0, "records": _batch(b"z")}]
        answer = await conn.call(apis_data.PRODUCE, body)
        assert answer["topics"][0]["partitions"][0]["error"] == 0
    finally:
        conn.close()


async def test_alter_configs_naming_a_topic_twice_is_refused(broker: BrokerProcess) -> None:
    conn = await _connect(broker)
    try:
        await _create(conn, "dup-alter", "dup-alter-other")
        entries = [
            {"name": "dup-alter", "configs": {"retention.ms": str(1000 + i)}}
            for i in range(REPEATS)
        ]
        entries.append({"name": "dup-alter-other", "configs": {"retention.ms": "5000"}})
        answer = await conn.call(apis_core.ALTER_CONFIGS, {"topics": entries})
        results = answer["topics"]
        assert len(results) == REPEATS + 1
        assert {r["error"] for r in results[:REPEATS]} == {InvalidRequestError.code}
        assert "'dup-alter' appears more than once" in results[0]["message"]
        assert results[REPEATS]["error"] == 0  # the other topic is changed
        described = await conn.call(
            apis_core.DESCRIBE_CONFIGS,
            {
                "topics": [
                    {"name": "dup-alter", "keys": ["retention.ms"]},
                    {"name": "dup-alter-other", "keys": ["retention.ms"]},
                ]
            },
        )
        values = [t["configs"][0] for t in described["topics"]]
        assert values[0]["is_default"]  # none of the repeated entries was applied
        assert values[1]["value"] == "5000"
    finally:
        conn.close()


async def test_create_and_delete_topics_refuse_a_name_given_twice(broker: BrokerProcess) -> None:
    conn = await _connect(broker)
    try:
        topic = {"name": "dup-create", "partitions": 1, "replication_factor": 1, "configs": {}}
        answer = await conn.call(
            apis_core.CREATE_TOPICS, {"topics": [topic, topic], "timeout_ms": 10_000}
        )
        assert [t["error"] for t in answer["topics"]] == [InvalidRequestError.code] * 2
        meta = await conn.call(
            apis_core.METADATA, {"topics": ["dup-create"], "allow_auto_topic_creation": False}
        )
        assert meta["topics"][0]["error"] != 0  # not created
        await _create(conn, "dup-delete")
        answer = await conn.call(
            apis_core.DELETE_TOPICS, {"topics": ["dup-delete"] * 3, "timeout_ms": 10_000}
        )
        assert [t["error"] for t in answer["topics"]] == [InvalidRequestError.code] * 3
        meta = await conn.call(
            apis_core.METADATA,
            {"topics": ["dup-delete"] * REPEATS, "allow_auto_topic_creation": False},
        )
        assert [t["error"] for t in meta["topics"]] == [0]  # still there; asked once, answered once
    finally:
        conn.close()


def _revision(data_dir: Path) -> int:
    return int(json.loads((data_dir / "metadata.json").read_bytes())["revision"])


async def test_alter_configs_of_many_topics_writes_the_metadata_once(broker: BrokerProcess) -> None:
    names = [f"many-alter-{i}" for i in range(40)]
    conn = await _connect(broker)
    try:
        await _create(conn, *names)
        before = _revision(broker.data_dir)
        entries = [{"name": n, "configs": {"retention.ms": "7000"}} for n in names]
        answer = await conn.call(apis_core.ALTER_CONFIGS, {"topics": entries})
        assert [t["error"] for t in answer["topics"]] == [0] * len(names)
        # one store revision for the 40 topics (one per topic before); slack for an
        # unrelated write of the broker meanwhile
        assert _revision(broker.data_dir) - before <= 2
        described = await conn.call(
            apis_core.DESCRIBE_CONFIGS,
            {"topics": [{"name": n, "keys": ["retention.ms"]} for n in names]},
        )
        assert {t["configs"][0]["value"] for t in described["topics"]} == {"7000"}
    finally:
        conn.close()


async def test_describe_groups_describes_a_group_asked_twice_once(broker: BrokerProcess) -> None:
    conn = await _connect(broker)
    try:
        answer = await conn.call(apis_groups.DESCRIBE_GROUPS, {"groups": ["dup-group"] * REPEATS})
        assert [g["group_id"] for g in answer["groups"]] == ["dup-group"]
    finally:
        conn.close()


async def test_describe_queue_answers_a_partition_asked_twice_once(broker: BrokerProcess) -> None:
    conn = await _connect(broker)
    try:
        await _create(conn, "dup-queue")
        body = {"group": "g", "topic": "dup-queue", "partitions": [0] * REPEATS}
        answer = await conn.call(apis_queues.DESCRIBE_QUEUE, body)
        assert [p["partition"] for p in answer["partitions"]] == [0]
        assert answer["partitions"][0]["error"] == 0
    finally:
        conn.close()

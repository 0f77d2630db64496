"""Validation gaps of issue 18 (F10), on a live broker: configs parsed strictly (ASCII
digits, each key with its range), timestamps far ahead and transactional batches
refused, ``min.insync.replicas`` above the broker count refused, offset commits for
topics that do not exist refused, dead-letter queues with illegal or internal names
refused at configuration.

Each test talks to a real ``mq serve`` process on loopback (see conftest.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from broker_process import BrokerProcess

from mq.client.connection import Connection
from mq.errors import (
    InvalidConfigError,
    InvalidRecordError,
    InvalidTimestampError,
    UnknownTopicOrPartitionError,
)
from mq.records.records import build_batch
from mq.wire import apis_core, apis_data, apis_groups

YEAR_MS = 365 * 24 * 3600 * 1000


async def _connect(broker: BrokerProcess) -> Connection:
    host, port = broker.bootstrap.rsplit(":", 1)
    return await Connection.open(host, int(port), client_id="strict-test")


async def _create(conn: Connection, name: str, configs: dict[str, str]) -> dict[str, Any]:
    body = {
        "topics": [{"name": name, "partitions": 1, "replication_factor": 1, "configs": configs}],
        "timeout_ms": 10_000,
    }
    answer: dict[str, Any] = (await conn.call(apis_core.CREATE_TOPICS, body))["topics"][0]
    return answer


BAD_CONFIGS = [
    ({"min.insync.replicas": "\u00b2"}, "min.insync.replicas must be an integer from 1 to"),
    ({"queue.max.deliveries": "\u00b2"}, "queue.max.deliveries must be an integer from 1 to"),
    ({"flush.ms": str(1 << 63)}, "flush.ms must be an integer from 1 to"),
    ({"segment.ms": "\u0661\u0662"}, "segment.ms must be an integer from 1 to"),  # Arabic-Indic 12
    ({"retention.ms": "1_000"}, "retention.ms must be an integer from 1 to"),
    ({"min.cleanable.dirty.ratio": "nan"}, "min.cleanable.dirty.ratio must be a number from 0"),
    ({"min.insync.replicas": "2"}, "above the 1 broker(s)"),
    ({"queue.dead.letter.queue": "no spaces allowed"}, "queue.dead.letter.queue: topic name"),
    ({"queue.dead.letter.queue": "__consumer_offsets"}, "cannot be the internal topic"),
    ({"queue.dead.letter.queue": "__share_state"}, "cannot be the internal topic"),
]


@pytest.mark.parametrize(("configs", "message"), BAD_CONFIGS)
async def test_a_bad_config_is_invalid_config_naming_key_and_range(
    broker: BrokerProcess, configs: dict[str, str], message: str
) -> None:
    conn = await _connect(broker)
    try:
        created = await _create(conn, "strict-created", configs)
        assert created["error"] == InvalidConfigError.code, created
        assert message in created["message"]
        if not (await _create(conn, "strict-altered", {}))["error"]:
            pass  # made by an earlier case
        body = {"topics": [{"name": "strict-altered", "configs": configs}]}
        altered = (await conn.call(apis_core.ALTER_CONFIGS, body))["topics"][0]
        assert altered["error"] == InvalidConfigError.code, altered
        assert message in altered["message"]
    finally:
        conn.close()


def _produce(topic: str, records: bytes) -> dict[str, Any]:
    partitions = [{"partition": 0, "records": records}]
    return {"acks": 1, "timeout_ms": 5000, "topics": [{"name": topic, "partitions": partitions}]}


async def test_timestamps_far_ahead_and_transactional_batches_are_refused(
    broker: BrokerProcess,
) -> None:
    conn = await _connect(broker)
    try:
        assert (await _create(conn, "strict-produce", {}))["error"] == 0
        now = int(time.time() * 1000)
        cases = [
            (build_batch([(None, b"late", [], now + 1_000 * YEAR_MS)]), InvalidTimestampError),
            (build_batch([(None, b"soon", [], now + 2 * 3600 * 1000)]), InvalidTimestampError),
            (build_batch([(None, b"txn", [], now)], transactional=True), InvalidRecordError),
        ]
        for records, error in cases:
            answer = await conn.call(apis_data.PRODUCE, _produce("strict-produce", records))
            result = answer["topics"][0]["partitions"][0]
            assert result["error"] == error.code, result
        fine = build_batch([(None, b"now", [], now + 60_000)])  # a clock a minute ahead
        answer = await conn.call(apis_data.PRODUCE, _produce("strict-produce", fine))
        assert answer["topics"][0]["partitions"][0]["base_offset"] == 0  # nothing else went in
    finally:
        conn.close()


async def test_offset_commits_for_topics_that_do_not_exist_are_refused(
    broker: BrokerProcess,
) -> None:
    conn = await _connect(broker)
    try:
        assert (await _create(conn, "strict-commit", {}))["error"] == 0
        part = {"partition": 0, "offset": 5, "leader_epoch": -1, "metadata": None}
        far = {**part, "partition": 9}
        body = {
            "group_id": "strict-group",
            "member_id": "",
            "generation_id": -1,
            "topics": [
                {"name": "strict-commit", "partitions": [part, far]},
                {"name": "strict-no-such-topic", "partitions": [part]},
            ],
        }
        answer = await conn.call(apis_groups.OFFSET_COMMIT, body)
        errors = [[p["error"] for p in t["partitions"]] for t in answer["topics"]]
        unknown = UnknownTopicOrPartitionError.code
        assert errors == [[0, unknown], [unknown]]
        fetched = await conn.call(apis_groups.OFFSET_FETCH, {"group_id": "strict-group"})
        assert [t["name"] for t in fetched["topics"]] == ["strict-commit"]
    finally:
        conn.close()

"""Broker-only APIs and internal topics are not for clients (issue 18).

A client connection gets CLUSTER_AUTHORIZATION_FAILED for replica_fetch and
internal_append, TOPIC_AUTHORIZATION_FAILED for admin requests naming an
internal topic; a connection that shows the cluster's inter-broker secret
(``broker_hello``) is served as a broker. Real ``mq serve`` processes on loopback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess

from mq.client.connection import Connection
from mq.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
from mq.wire import apis_core, apis_data, apis_groups
from mq.wire.apis_replication import INTERNAL_APPEND, REPLICA_FETCH
from mq.wire.registry import api_by_name

SECRET = "a-secret-for-this-test-only"


@pytest.fixture
async def secret_broker(tmp_path: Path) -> AsyncIterator[BrokerProcess]:
    """A broker with a configured inter-broker secret."""
    process = BrokerProcess(tmp_path / "data", settings={"inter_broker_secret": SECRET})
    process.start()
    try:
        yield process
    finally:
        process.stop()


async def _client(broker: BrokerProcess) -> Connection:
    host, port = broker.bootstrap.rsplit(":", 1)
    return await Connection.open(host, int(port), client_id="not-a-broker")


def _replica_fetch() -> dict[str, object]:
    part = {"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1}
    return {
        "replica_id": 7,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [{"name": "__consumer_offsets", "partitions": [part]}],
    }


async def _with_offsets_topic(conn: Connection) -> None:
    """Have the broker create ``__consumer_offsets`` (a group's first request does)."""
    await conn.call(apis_groups.FIND_COORDINATOR, {"key": "g"})


async def test_a_client_gets_no_broker_only_api(broker: BrokerProcess) -> None:
    conn = await _client(broker)
    try:
        await _with_offsets_topic(conn)
        with pytest.raises(ClusterAuthorizationFailedError):
            await conn.call(REPLICA_FETCH, _replica_fetch())
        append = {"topic": "__consumer_offsets", "partition": 0, "records": b"", "timeout_ms": 1}
        with pytest.raises(ClusterAuthorizationFailedError):
            await conn.call(INTERNAL_APPEND, append)
        hello = api_by_name("broker_hello")
        assert hello is not None
        wrong = {"node_id": 7, "secret": b"not the secret, but long enough"}
        with pytest.raises(ClusterAuthorizationFailedError):
            await conn.call(hello, wrong)
        with pytest.raises(ClusterAuthorizationFailedError):  # still a client
            await conn.call(REPLICA_FETCH, _replica_fetch())
        meta = await conn.call(apis_core.METADATA, {"topics": None})  # served as usual
        assert meta["brokers"]
    finally:
        conn.close()
    assert "not the secret" not in "".join(broker.output)


async def test_a_broker_showing_the_secret_is_served(secret_broker: BrokerProcess) -> None:
    from mq.replication.hello import BrokerCredentials, open_broker_connection  # the new API

    host, port = secret_broker.bootstrap.rsplit(":", 1)
    client = await _client(secret_broker)
    await _with_offsets_topic(client)
    client.close()
    credentials = BrokerCredentials(7, SECRET.encode())
    conn = await open_broker_connection(host, int(port), credentials, client_id="a-broker")
    try:
        answer = await conn.call(REPLICA_FETCH, _replica_fetch())
        assert answer["topics"][0]["name"] == "__consumer_offsets"
    finally:
        conn.close()
    assert SECRET not in "".join(secret_broker.output)


async def test_clients_cannot_touch_internal_topics(broker: BrokerProcess) -> None:
    conn = await _client(broker)
    try:
        await _with_offsets_topic(conn)
        requests = [
            (
                apis_core.ALTER_CONFIGS,
                {"topics": [{"name": "__consumer_offsets", "configs": {"retention.ms": "1"}}]},
            ),
            (apis_core.DELETE_TOPICS, {"topics": ["__consumer_offsets"], "timeout_ms": 1000}),
            (
                apis_core.DELETE_RECORDS,
                {
                    "topics": [
                        {
                            "name": "__consumer_offsets",
                            "partitions": [{"partition": 0, "offset": -1}],
                        }
                    ],
                    "timeout_ms": 1000,
                },
            ),
            (
                apis_core.CREATE_TOPICS,
                {
                    "topics": [
                        {
                            "name": "__share_state",
                            "partitions": 1,
                            "replication_factor": 1,
                            "configs": {"retention.ms": "1"},
                        }
                    ],
                    "timeout_ms": 1000,
                },
            ),
        ]
        for api, body in requests:
            with pytest.raises(TopicAuthorizationFailedError):
                await conn.call(api, body)
        described = await conn.call(
            apis_core.DESCRIBE_CONFIGS,
            {"topics": [{"name": "__consumer_offsets", "keys": ["retention.ms"]}]},
        )
        assert described["topics"][0]["configs"][0]["is_default"]  # retention untouched
        # nor made in advance through auto-creation (a metadata request or a produce)
        meta = await conn.call(
            apis_core.METADATA, {"topics": ["__share_state"], "allow_auto_topic_creation": True}
        )
        assert meta["topics"][0]["error"] == TopicAuthorizationFailedError.code
        produce = {
            "acks": 1,
            "timeout_ms": 1000,
            "topics": [{"name": "__share_state", "partitions": [{"partition": 0, "records": b""}]}],
        }
        answer = await conn.call(apis_data.PRODUCE, produce)
        assert answer["topics"][0]["partitions"][0]["error"] == TopicAuthorizationFailedError.code
        names = {
            t["name"] for t in (await conn.call(apis_core.METADATA, {"topics": None}))["topics"]
        }
        assert "__share_state" not in names
    finally:
        conn.close()

"""The client library honours throttle_time_ms: after a throttled response, that
connection writes nothing until the time is up (no request sits unread on the broker),
and a throttle is neither an error nor a retry."""

from __future__ import annotations

import time
from pathlib import Path

from inprocess_broker import running_broker

import mq
from mq.client.connection import Connection
from mq.records.records import build_batch
from mq.wire.apis_core import API_VERSIONS
from mq.wire.apis_data import PRODUCE

RATE = 10_000
"""producer_byte_rate of the test's client: a 30 KB produce puts it 2 s in debt."""


def produce_body(size: int) -> dict[str, object]:
    batch = build_batch([(None, bytes(size), (), int(time.time() * 1000))])
    return {
        "acks": 1,
        "timeout_ms": 10_000,
        "topics": [{"name": "honour", "partitions": [{"partition": 0, "records": batch}]}],
    }


async def test_a_throttled_connection_waits_before_its_next_request(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as running:
        async with mq.Admin(running.bootstrap) as admin:
            await admin.create_topic("honour", partitions=1, replication_factor=1)
            await admin.alter_client_quotas(
                mq.QuotaEntity(client_id="honour"), {"producer_byte_rate": RATE}
            )
        host, port = running.bootstrap.rsplit(":", 1)
        conn = await Connection.open(host, int(port), client_id="honour")
        try:
            response = await conn.call(PRODUCE, produce_body(3 * RATE))
            assert response["topics"][0]["partitions"][0]["error"] == 0
            assert 1_500 <= conn.throttled_ms <= 2_500
            assert not conn.ready  # nothing may be written on it now
            started = time.monotonic()
            await conn.call(API_VERSIONS, {})  # waits out the throttle, then goes
            waited = time.monotonic() - started
            assert 1.5 <= waited <= 4.0
            assert conn.ready
        finally:
            conn.close()

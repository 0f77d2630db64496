"""Quotas set through one broker apply on every broker within a second (etcd watch)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from cluster_helpers import CLUSTER_SETTINGS

import mq
from mq.client.connection import Connection
from mq.local_cluster import LocalCluster
from mq.wire.apis_core import METADATA
from mq.wire.apis_quotas import DESCRIBE_CLIENT_QUOTAS

FILTER = {"components": [{"entity_type": "client-id", "match_type": 0, "match": "tenant-x"}]}


async def test_a_quota_set_on_one_broker_applies_on_another_within_a_second(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(tmp_path, nodes=2, settings=CLUSTER_SETTINGS)
    cluster.start()
    try:
        one, two = cluster.broker(1), cluster.broker(2)
        conn = await Connection.open(two.host, two.port, client_id="tenant-x")
        try:
            assert (await conn.call(DESCRIBE_CLIENT_QUOTAS, FILTER))["entries"] == []
            async with mq.Admin(one.bootstrap) as admin:
                await admin.alter_client_quotas(
                    mq.QuotaEntity(client_id="tenant-x"), {"request_percentage": 1}
                )
            set_at = time.monotonic()
            while not (await conn.call(DESCRIBE_CLIENT_QUOTAS, FILTER))["entries"]:
                assert time.monotonic() - set_at < 1.0, "broker 2 did not see the quota in 1 s"
                await asyncio.sleep(0.01)
            # and broker 2 enforces it: its loop time for this client is 1 %
            while conn.throttled_ms == 0:
                assert time.monotonic() - set_at < 30
                await conn.call(METADATA, {"topics": None})
        finally:
            conn.close()
    finally:
        cluster.stop()

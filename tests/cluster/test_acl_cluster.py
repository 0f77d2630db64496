"""ACLs in a 3-broker cluster (real etcd, real ``mq serve`` processes, ``authorizer = "acl"``).

A binding added through one broker is stored in etcd and reaches the others'
caches by their watches: another broker judges by it within a second.

Until listeners authenticate (the other half of issue 19) every connection is
``User:ANONYMOUS``, the brokers' own too; so the cluster is bootstrapped
offline (``mq acl add --metadata etcd://...`` before the brokers start) with
CLUSTER_ACTION for anonymous (``broker_hello``: the inter-broker secret is then
the brokers' only proof, as before) and ALTER / DESCRIBE / CREATE on the
cluster for the operator. Once SASL lands, those go to the brokers' and the
operator's own principals.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from cluster_helpers import CLUSTER_SETTINGS, wait_until

from mq import Admin
from mq.acl.model import AclBinding, AclFilter, Operation, Permission, ResourceType
from mq.client.connection import Connection
from mq.local_cluster import START_TIMEOUT_S, LocalCluster
from mq.wire.apis_core import METADATA

ANONYMOUS = "User:ANONYMOUS"
PROPAGATION_S = 1.0
"""The issue's bound: a change is visible cluster-wide within a second."""


def _bootstrap(etcd_url: str) -> None:
    ops = ["cluster_action", "alter", "describe", "create"]
    args = ["acl", "add", "--metadata", etcd_url, "--principal", ANONYMOUS, "--cluster"]
    for op in ops:
        args += ["--operation", op]
    done = subprocess.run(
        [sys.executable, "-m", "mq_cli.main", *args], capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()


async def _described(conn: Connection, topic: str) -> int:
    """The metadata error of ``topic`` on this connection's broker (29: refused)."""
    response = await conn.call(METADATA, {"topics": [topic]})
    (entry,) = response["topics"]
    code: int = entry["error"]
    return code


async def test_an_acl_added_on_one_broker_applies_on_another_within_a_second(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster", 3, settings={**CLUSTER_SETTINGS, "authorizer": "acl"}
    )
    cluster.base_dir.mkdir(parents=True, exist_ok=True)
    cluster.etcd.start()
    try:
        _bootstrap(cluster.etcd.url)
        for broker in cluster.brokers.values():
            broker.launch()
        deadline = time.monotonic() + START_TIMEOUT_S
        for broker in cluster.brokers.values():
            broker.wait_listening(deadline - time.monotonic())
        first, third = cluster.broker(1), cluster.broker(3)
        async with Admin(bootstrap=first.bootstrap) as admin:
            await wait_until(
                lambda: admin.create_topic("orders", 1, 3, exist_ok=True),
                what="a replicated topic created with the cluster's CREATE",
            )
        host, port = third.bootstrap.rsplit(":", 1)
        conn = await Connection.open(host, int(port), client_id="acl-test")
        try:
            assert await _described(conn, "orders") == 29  # no DESCRIBE yet
            read = AclBinding(
                ANONYMOUS, Permission.ALLOW, Operation.READ, ResourceType.TOPIC, "orders"
            )
            async with Admin(bootstrap=first.bootstrap) as admin:
                await admin.create_acls([read])
                added_at = time.monotonic()
                while await _described(conn, "orders") == 29:
                    assert time.monotonic() - added_at < PROPAGATION_S, "not on broker 3 in time"
                    await asyncio.sleep(0.01)
                assert await admin.describe_acls(AclFilter(resource_type=ResourceType.TOPIC)) == [
                    read
                ]
                assert await admin.delete_acls(
                    [AclFilter(principal=ANONYMOUS, resource_name="orders")]
                ) == [read]
                removed_at = time.monotonic()
                while await _described(conn, "orders") != 29:
                    assert time.monotonic() - removed_at < PROPAGATION_S, "still on broker 3"
                    await asyncio.sleep(0.01)
        finally:
            conn.close()
    finally:
        cluster.stop()

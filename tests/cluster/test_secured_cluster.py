"""A 3-broker cluster whose only listener is ``sasl_ssl`` (issue 19): brokers replicate,
forward and coordinate over TLS with SCRAM-SHA-512 as the user ``broker``; clients use
SCRAM-SHA-256. The users are written into etcd offline (``mq user add --metadata``)
before the first broker starts. A partition's leader is killed with SIGKILL while an
idempotent producer sends with acks=all; every acknowledged message is then read back
in order, and the restarted broker is back in the ISR (it could only have caught up
through an authenticated TLS connection: there is no other listener).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import CLUSTER_SETTINGS, wait_until
from tls_certs import make_pki

from mq import Admin, Consumer, Producer, TopicPartition
from mq.local_cluster import START_TIMEOUT_S, LocalCluster

pytestmark = pytest.mark.slow

TOPIC = "secured"
PARTITIONS = 2
MESSAGES = 3_000


def _add_user(etcd_url: str, name: str, password: str, mechanism: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mq_cli.main",
            "user",
            "add",
            name,
            "--password-stdin",
            "--mechanism",
            mechanism,
            "--metadata",
            etcd_url,
        ],
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[LocalCluster, dict[str, Any]]]:
    pki = make_pki(tmp_path / "pki")
    settings: dict[str, Any] = {
        **CLUSTER_SETTINGS,
        "tls_cert": str(pki.server.cert),
        "tls_key": str(pki.server.key),
        "tls_trust_ca": str(pki.ca),
        "inter_broker_listener": "SASL_SSL",
        "inter_broker_sasl_mechanism": "SCRAM-SHA-512",
        "inter_broker_sasl_username": "broker",
        "inter_broker_sasl_password": "broker-secret",
    }
    cluster = LocalCluster(tmp_path / "cluster", 3, settings=settings)
    for broker in cluster.brokers.values():  # the one listener: SASL_SSL on the broker's port
        broker.settings["listeners"] = [f"sasl_ssl://{broker.host}:{broker.port}"]
    client = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
        "ssl_cafile": str(pki.ca),
    }
    cluster.base_dir.mkdir(parents=True, exist_ok=True)
    cluster.etcd.start()
    try:
        _add_user(cluster.etcd.url, "broker", "broker-secret", "SCRAM-SHA-512")
        _add_user(cluster.etcd.url, "alice", "alice-secret", "SCRAM-SHA-256")
        for broker in cluster.brokers.values():
            broker.launch()
        deadline = time.monotonic() + START_TIMEOUT_S
        for broker in cluster.brokers.values():
            broker.wait_listening(deadline - time.monotonic())
        yield cluster, client
    finally:
        cluster.stop()


async def _leader(bootstrap: str, client: dict[str, Any], index: int) -> tuple[int, list[int]]:
    async with Admin(bootstrap, request_timeout_ms=5_000, **client) as admin:
        description = await admin.describe_topic(TOPIC)
    part = description.partitions[index]
    return part.leader, list(part.isr)


async def test_a_sasl_ssl_cluster_survives_a_leader_kill(
    secured: tuple[LocalCluster, dict[str, Any]],
) -> None:
    cluster, client = secured
    async with Admin(cluster.bootstrap, **client) as admin:
        await admin.create_topic(
            TOPIC, partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"}
        )

    async def replicated() -> bool:
        for index in range(PARTITIONS):
            if len((await _leader(cluster.bootstrap, client, index))[1]) != 3:
                return False
        return True

    await wait_until(replicated, timeout_s=60, what="every replica in sync over SASL_SSL")
    victim, _ = await _leader(cluster.bootstrap, client, 0)
    acked: dict[int, tuple[int, int]] = {}
    async with Producer(
        cluster.bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=5_000,
        delivery_timeout_ms=120_000,
        **client,
    ) as producer:
        futures = []
        for i in range(MESSAGES):
            futures.append(await producer.send(TOPIC, key=b"k%d" % (i % 50), value=b"%d" % i))
            if i == MESSAGES // 3:
                cluster.kill(victim)
            if i % 200 == 199:
                await asyncio.sleep(0.05)
        for i, future in enumerate(futures):
            meta = await future
            acked[i] = (meta.partition, meta.offset)
    new_leader, _ = await _leader(cluster.bootstrap, client, 0)
    assert new_leader != victim
    await asyncio.to_thread(cluster.restart, victim)
    await wait_until(replicated, timeout_s=90, what="the restarted broker back in the ISR")

    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    got: dict[tuple[int, int], bytes] = {}
    async with Consumer(
        bootstrap=cluster.bootstrap, auto_offset_reset="earliest", **client
    ) as consumer:
        consumer.assign(tps)
        deadline = time.monotonic() + 90
        while len(got) < MESSAGES and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200, max_records=5_000)
            for tp, records in batches.items():
                for record in records:
                    got[(tp.partition, record.offset)] = record.value or b""
    for i, position in acked.items():
        assert got.get(position) == b"%d" % i, f"message {i} is not at {position}"
    assert len(got) == MESSAGES

"""A 3-broker cluster with one secured listener (issue 19): ``sasl_ssl``, where brokers
replicate, forward and coordinate over TLS with SCRAM-SHA-512 as the user ``broker``
and clients use SCRAM-SHA-256 (the users written into etcd offline, ``mq user add
--metadata``, before the first broker starts); or ``ssl`` with mutual TLS, where
brokers show their certificates to each other. A partition's leader is killed with SIGKILL while an
idempotent producer sends with acks=all; every acknowledged message is then read back
in order, and the restarted broker is back in the ISR (it could only have caught up
through an authenticated TLS connection: there is no other listener).
"""

from __future__ import annotations

import asyncio
import gc
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
from mq.client.connection import Connection
from mq.client.security import security_from
from mq.errors import SaslAuthenticationFailedError
from mq.local_cluster import START_TIMEOUT_S, LocalCluster

pytestmark = [
    pytest.mark.slow,
    # A TLS handshake cut short by a killed broker can leave asyncio's raw socket
    # transport unclosed under CPython 3.11's sslproto: collected (below) and ignored
    # here, where it happens, instead of failing whichever test the collector runs in.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning"),
]

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


@pytest.fixture(params=["sasl_ssl", "mtls"])
def secured(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[LocalCluster, dict[str, Any]]]:
    """The cluster, secured one of two ways, and the client's security keywords:
    ``sasl_ssl`` (SCRAM-SHA-512 between brokers, SCRAM-SHA-256 for clients) or
    ``mtls`` (an ``ssl`` listener requiring client certificates; brokers show theirs)."""
    pki = make_pki(tmp_path / "pki")
    settings: dict[str, Any] = {
        **CLUSTER_SETTINGS,
        "tls_cert": str(pki.server.cert),
        "tls_key": str(pki.server.key),
        "tls_trust_ca": str(pki.ca),
    }
    client: dict[str, Any]
    if request.param == "sasl_ssl":
        scheme = "sasl_ssl"
        settings |= {
            "inter_broker_listener": "SASL_SSL",
            "inter_broker_sasl_mechanism": "SCRAM-SHA-512",
            "inter_broker_sasl_username": "broker",
            "inter_broker_sasl_password": "broker-secret",
            "super_users": ["alice"],  # the ACLs are on (the listener authenticates)
        }
        client = {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-secret",
            "ssl_cafile": str(pki.ca),
        }
    else:
        scheme = "ssl"
        settings |= {
            "inter_broker_listener": "SSL",
            "tls_client_ca": str(pki.ca),
            # the ACLs are on: the brokers' certificate (CN=broker) and alice may do anything
            "super_users": ["alice", "broker"],
        }
        alice = pki.clients["alice"]
        client = {
            "security_protocol": "SSL",
            "ssl_cafile": str(pki.ca),
            "ssl_certfile": str(alice.cert),
            "ssl_keyfile": str(alice.key),
        }
    cluster = LocalCluster(tmp_path / "cluster", 3, settings=settings)
    for broker in cluster.brokers.values():  # the one listener, on the broker's port
        broker.settings["listeners"] = [f"{scheme}://{broker.host}:{broker.port}"]
    cluster.base_dir.mkdir(parents=True, exist_ok=True)
    cluster.etcd.start()
    try:
        if request.param == "sasl_ssl":
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
        gc.collect()  # the unclosed TLS transports, if any, finalized in this test


async def _leader(bootstrap: str, client: dict[str, Any], index: int) -> tuple[int, list[int]]:
    async with Admin(bootstrap, request_timeout_ms=5_000, **client) as admin:
        description = await admin.describe_topic(TOPIC)
    part = description.partitions[index]
    return part.leader, list(part.isr)


async def test_a_secured_cluster_survives_a_leader_kill(
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


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
async def test_a_user_added_through_one_broker_logs_in_on_another_at_once(
    secured: tuple[LocalCluster, dict[str, Any]],
) -> None:
    cluster, client = secured
    async with Admin(cluster.broker(1).bootstrap, **client) as admin:
        await admin.add_user("carol", "carol-secret")
    added = time.monotonic()
    host, port = cluster.broker(3).bootstrap.rsplit(":", 1)
    carol = security_from(
        {**client, "sasl_plain_username": "carol", "sasl_plain_password": "carol-secret"}
    )
    while True:
        try:
            conn = await Connection.open(host, int(port), security=carol)
            break
        except SaslAuthenticationFailedError:
            assert time.monotonic() - added < 5, "broker 3 never learned carol's credential"
    conn.close()
    print(f"\ncarol logged in on broker 3 {time.monotonic() - added:.2f} s after her creation")

"""Chaos on a secured cluster (issue 19: "the fault tests still pass on it").

``mq chaos --secure`` gives every broker one ``sasl_ssl`` listener: brokers talk to
each other over TLS as a SCRAM user, the workloads' clients log in as a super user,
and the ACLs are on. The first test shows the cluster really is closed to anyone
else; the second runs a chaos campaign on it (kills, pauses, leader and controller
moves, ...; the root faults too when root) and finds no anomaly.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from mq import Admin
from mq.chaos.nemesis import KINDS, ROOT_KINDS
from mq.chaos.runner import CLUSTER_SETTINGS, RunConfig, run_campaign
from mq.chaos.secured import secure
from mq.errors import MQError, SaslAuthenticationFailedError
from mq.local_cluster import LocalCluster

pytestmark = [
    pytest.mark.slow,
    # a TLS handshake cut short by a killed broker can leave asyncio's raw socket
    # transport unclosed (see tests/cluster/test_secured_cluster.py)
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning"),
]

HOSTS = ("127.0.6.11", "127.0.6.12", "127.0.6.13")
ETCD_HOST = "127.0.6.19"
DURATION_S = 20.0
REFUSAL_TIMEOUT_MS = 3_000


async def _brokers(bootstrap: str, **security: object) -> int:
    async with Admin(bootstrap, request_timeout_ms=REFUSAL_TIMEOUT_MS, **security) as admin:  # type: ignore[arg-type]
        return len((await admin.describe_cluster()).brokers)


def test_the_secured_cluster_admits_only_its_users(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path / "c", 3, settings=CLUSTER_SETTINGS, hosts=HOSTS, etcd_host=ETCD_HOST
    )
    prepare = secure(cluster)
    cluster.start(prepare)
    try:
        security = cluster.client_security
        assert asyncio.run(_brokers(cluster.bootstrap, **security)) >= 1
        with pytest.raises(SaslAuthenticationFailedError):
            asyncio.run(_brokers(cluster.bootstrap, **{**security, "sasl_plain_password": "x"}))
        with pytest.raises((MQError, OSError)):  # no plaintext listener at all
            asyncio.run(_brokers(cluster.bootstrap))
    finally:
        cluster.stop()
    for node, broker in cluster.brokers.items():
        listeners = [line.strip() for line in broker.output if line.startswith("mq listener ")]
        assert listeners == [f"mq listener SASL_SSL on {broker.host}:{broker.port}"], node


def test_a_campaign_on_a_secured_cluster_finds_no_anomaly(tmp_path: Path) -> None:
    root = os.geteuid() == 0
    config = RunConfig(
        seed=2_000,
        workload="both",
        duration=DURATION_S,
        faults=[k for k in KINDS if root or k not in ROOT_KINDS],
        data_dir=tmp_path,
        hosts=HOSTS,
        etcd_host=ETCD_HOST,
        secure=True,
        keep=True,
    )
    (result,) = run_campaign(config, 1, log=print)
    found = {k: v for k, v in result.anomalies.counts.items() if v}
    faults = [(f.kind, f.target, f.skipped) for f in result.faults]
    assert not found, f"{found} {result.anomalies.examples} {faults}"
    assert result.problems == []
    assert result.missed_plants == []
    assert result.injected >= 1, faults
    assert result.acknowledged > 0
    assert result.queue_deliveries > 0
    assert result.healed
    log = (Path(result.directory) / "node-1.log").read_text()
    assert "mq listener SASL_SSL on" in log
    assert "mq listener PLAINTEXT" not in log

"""Each broker of a LocalCluster on its own loopback address: it listens there, advertises
that address (so that a fault on one address hits one broker), and keeps it on restart."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

from mq import Admin
from mq.chaos.runner import CLUSTER_SETTINGS
from mq.local_cluster import LocalCluster

HOSTS = ("127.0.6.4", "127.0.6.5", "127.0.6.6")
ETCD_HOST = "127.0.6.8"


REGISTER_TIMEOUT_S = 20.0
"""A broker listens before its registration in etcd is visible to the others."""


async def _advertised(bootstrap: str, brokers: int = 3) -> dict[int, tuple[str, int]]:
    """The advertised addresses, once ``brokers`` brokers are registered (bounded)."""
    deadline = time.monotonic() + REGISTER_TIMEOUT_S
    async with Admin(bootstrap, request_timeout_ms=5_000) as admin:
        while True:
            metadata = await admin._client.fetch_all_metadata()
            found = {b["node_id"]: (b["host"], b["port"]) for b in metadata["brokers"]}
            if len(found) >= brokers or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.1)


async def test_brokers_listen_on_and_advertise_their_own_address(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path / "c", 3, settings=CLUSTER_SETTINGS, hosts=HOSTS, etcd_host=ETCD_HOST
    )
    cluster.start()
    try:
        assert cluster.etcd.url.startswith(f"etcd://{ETCD_HOST}:")
        expected = {n: (HOSTS[n - 1], cluster.brokers[n].port) for n in (1, 2, 3)}
        assert cluster.bootstrap == ",".join(f"{h}:{p}" for h, p in expected.values())
        advertised = await _advertised(cluster.brokers[1].bootstrap)
        assert advertised == expected
        # Only on its own address: the same port on another loopback address is closed.
        host, port = expected[2]
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0
        cluster.kill(2)
        cluster.brokers[2].start()
        assert cluster.brokers[2].bootstrap == f"{host}:{port}"
        assert (await _advertised(cluster.brokers[2].bootstrap))[2] == (host, port)
    finally:
        cluster.stop()


def test_the_default_cluster_is_unchanged(tmp_path: Path) -> None:
    """Without hosts, every broker is on 127.0.0.1 and gets no --host argument."""
    cluster = LocalCluster(tmp_path / "c", 2)
    assert cluster.etcd.url.startswith("etcd://127.0.0.1:")
    for broker in cluster.brokers.values():
        assert broker.host == "127.0.0.1"
        assert "--host" not in broker.args()
    assert (
        len(
            {cluster.etcd.port, cluster.etcd.peer_port, *(b.port for b in cluster.brokers.values())}
        )
        == 4
    )

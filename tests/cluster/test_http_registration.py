"""Every broker's HTTP listener is known to the whole cluster (issue 21).

Three real brokers (real etcd), each with ``--http-port 0``: the port each one bound
is in its registration, so any broker tells every broker's HTTP URL — in the metadata
answer (:meth:`mq.Admin.describe_cluster`), in ``GET /api/cluster`` of its admin
API, and in ``mq cluster status`` — which is what a Prometheus service discovery or
a console needs to find every broker's ``/metrics``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import aiohttp
from cluster_helpers import wait_until

from mq import Admin
from mq.local_cluster import LocalCluster

TEST_TIMEOUT_S = 180
CLI_TIMEOUT_S = 60


async def cluster_status(bootstrap: str) -> dict[str, Any]:
    """``mq cluster status --json`` against one broker, as a process."""
    command = [sys.executable, "-m", "mq_cli.main", "cluster", "status", "--json"]
    proc = await asyncio.create_subprocess_exec(
        *command,
        "--bootstrap",
        bootstrap,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()
    found: dict[str, Any] = json.loads(out)
    return found


async def test_every_broker_knows_every_brokers_http_endpoint(
    http_cluster: LocalCluster,
) -> None:
    brokers = http_cluster.brokers
    expected = {node: b.http_url for node, b in brokers.items()}
    assert len(set(expected.values())) == 3  # three listeners, three ports
    async with asyncio.timeout(TEST_TIMEOUT_S), aiohttp.ClientSession() as session:
        for node, broker in brokers.items():

            async def described(bootstrap: str = broker.bootstrap) -> bool:
                async with Admin(bootstrap=bootstrap, request_timeout_ms=5_000) as admin:
                    return (await admin.describe_cluster()).http_urls == expected

            await wait_until(described, what=f"broker {node} telling every HTTP URL")

            async def console(url: str = expected[node]) -> bool:
                async with session.get(f"{url}/api/cluster") as response:
                    body = await response.json()
                return {b["node_id"]: b["http_url"] for b in body["brokers"]} == expected

            await wait_until(console, what=f"broker {node}'s /api/cluster with every URL")

        status = await cluster_status(brokers[2].bootstrap)
        assert {b["node_id"]: b["http_url"] for b in status["brokers"]} == expected
        for url in expected.values():  # what a service discovery would then scrape
            async with session.get(f"{url}/metrics") as response:
                assert response.status == 200
                assert "mq_" in await response.text()

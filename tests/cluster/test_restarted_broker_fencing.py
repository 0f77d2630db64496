"""Broker epochs: a broker restarted at once leads nothing in its pre-crash leader epoch
(issue 17, point 2).

A 3-broker cluster (real etcd, real ``mq serve`` processes). A broker is SIGKILLed and
started again before its registration expires: it accepts connections while it waits
for that, and must refuse to serve as leader the partitions it led before the crash
(their states are older than its new registration). Once registered, the controller
elects it (or another in-sync replica) in a new leader epoch: a restart bumps the
epoch of every partition it led.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import CLUSTER_SETTINGS, metadata, wait_until

from mq import Admin, Producer
from mq.client.connection import Connection
from mq.errors import NotLeaderOrFollowerError
from mq.local_cluster import LocalCluster
from mq.records.records import build_batch
from mq.wire import apis_data

pytestmark = pytest.mark.slow

SESSION_MS = 6_000
"""The brokers' default session: the restarted broker waits about this long for its old
registration to expire, accepting connections meanwhile."""
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    made = LocalCluster(
        tmp_path / "cluster", 3, settings={**CLUSTER_SETTINGS, "session_timeout_ms": SESSION_MS}
    )
    made.start()
    try:
        yield made
    finally:
        made.stop()


async def _states(bootstrap: str) -> dict[tuple[str, int], dict[str, Any]]:
    found = {}
    for topic in (await metadata(bootstrap))["topics"]:
        for part in topic["partitions"]:
            found[(topic["name"], part["partition"])] = dict(part)
    return found


def _produce(topic: str, index: int) -> Any:
    records = build_batch([(None, b"x", [], 0)])
    return {
        "acks": 1,
        "timeout_ms": 5000,
        "topics": [{"name": topic, "partitions": [{"partition": index, "records": records}]}],
    }


def _fetch(topic: str, index: int) -> Any:
    part = {"partition": index, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
    return {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [{"name": topic, "partitions": [part]}],
    }


async def _errors(host: str, port: int, keys: list[tuple[str, int]]) -> list[int]:
    """The error codes of a produce and a fetch sent straight to the broker, per key."""
    conn = await Connection.open(host, port)
    try:
        codes = []
        for topic, index in keys:
            produced = await conn.call(apis_data.PRODUCE, _produce(topic, index))
            codes.append(produced["topics"][0]["partitions"][0]["error"])
            fetched = await conn.call(apis_data.FETCH, _fetch(topic, index))
            codes.append(fetched["topics"][0]["partitions"][0]["error"])
        return codes
    finally:
        conn.close()
        await conn.wait_closed()


async def _accepts(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    return True


async def test_a_restarted_broker_leads_only_in_a_new_epoch(cluster: LocalCluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic("alone", PARTITIONS, 1)  # no other replica to fail over to
        await admin.create_topic("shared", PARTITIONS, 3)
    async with Producer(cluster.bootstrap) as producer:
        for topic in ("alone", "shared"):
            for index in range(PARTITIONS):
                await (await producer.send(topic, b"before", partition=index))
    admin_states = await _states(cluster.bootstrap)

    node = admin_states[("alone", 0)]["leader"]
    led = sorted(key for key, s in admin_states.items() if s["leader"] == node)
    assert ("alone", 0) in led
    before = {key: admin_states[key]["leader_epoch"] for key in led}

    cluster.kill(node)
    restarted = cluster.broker(node)
    restarted.launch()  # its registration has not expired: it waits for that
    await wait_until(lambda: _accepts(restarted.host, restarted.port), what="a listener")
    codes = await _errors(restarted.host, restarted.port, led)
    assert set(codes) == {NotLeaderOrFollowerError.code}, f"served before it was elected: {codes}"
    restarted.wait_listening(30)

    async def moved_on() -> dict[tuple[str, int], dict[str, Any]] | None:
        states = await _states(cluster.bootstrap)
        if all(
            states[key]["leader"] >= 0 and states[key]["leader_epoch"] > before[key] for key in led
        ):
            return states
        return None

    after = await wait_until(moved_on, what="a new leader epoch for every partition it led")
    assert after[("alone", 0)]["leader"] == node  # its only replica leads again
    alone = [key for key in led if key[0] == "alone"]
    assert await _wait_served(restarted.host, restarted.port, alone)


async def _wait_served(host: str, port: int, keys: list[tuple[str, int]]) -> bool:
    async def served() -> bool:
        return set(await _errors(host, port, keys)) == {0}

    return bool(await wait_until(served, what="the restarted broker leading again"))

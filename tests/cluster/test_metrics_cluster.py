"""Metrics and health of a real 2-broker cluster over a real etcd (issue 21): a frozen
follower leaves the ISR (the leader's ``mq_isr_shrinks_total`` and
``mq_partition_under_replicated`` say so) and rejoins it (``mq_isr_expands_total``);
one broker is the controller; both are ready once it is back."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import CLUSTER_SETTINGS, partition_state, wait_until
from prometheus_client.parser import text_string_to_metric_families

from mq import Admin, Producer
from mq.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

HTTP_TIMEOUT_S = 10.0
WAIT_S = 60.0


def gauge(url: str, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(f"{url}/metrics", timeout=HTTP_TIMEOUT_S) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=HTTP_TIMEOUT_S) as response:
            return bool(json.loads(response.read())["status"] == "ready")
    except urllib.error.HTTPError:
        return False


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[LocalCluster]:
    made = LocalCluster(tmp_path / "cluster", 2, settings=CLUSTER_SETTINGS, http=True)
    made.start()
    try:
        yield made
    finally:
        made.stop()


async def test_isr_shrink_and_expand_are_counted(pair: LocalCluster) -> None:
    urls = {n: b.http_url for n, b in pair.brokers.items()}
    async with Admin(bootstrap=pair.bootstrap) as admin:
        await admin.create_topic("watched", partitions=1, replication_factor=2)
    state = await wait_until(lambda: partition_state(pair.bootstrap, "watched", 0), what="state")
    leader = state["leader"]
    follower = next(n for n in pair.brokers if n != leader)
    async with Producer(bootstrap=pair.bootstrap, acks="all") as producer:
        await producer.send_and_wait("watched", b"before")
    labels = {"topic": "watched", "partition": "0"}

    async def leader_says(name: str, wanted: float, **more: str) -> bool:
        found = await asyncio.to_thread(gauge, urls[leader], name, **more)
        return found is not None and found >= wanted

    assert await asyncio.to_thread(gauge, urls[leader], "mq_isr_shrinks_total") == 0
    controllers = [await asyncio.to_thread(gauge, u, "mq_is_controller") for u in urls.values()]
    assert sorted(controllers) == [0, 1]
    pair.pause(follower)
    try:
        await wait_until(
            lambda: leader_says("mq_partition_under_replicated", 1, **labels),
            WAIT_S,
            "the partition under-replicated",
        )
        await wait_until(lambda: leader_says("mq_isr_shrinks_total", 1), WAIT_S, "a shrink")
    finally:
        pair.resume(follower)
    await wait_until(lambda: leader_says("mq_isr_expands_total", 1), WAIT_S, "an expansion")
    under = await asyncio.to_thread(gauge, urls[leader], "mq_partition_under_replicated", **labels)
    assert under == 0

    async def all_ready() -> bool:
        return all([await asyncio.to_thread(ready, u) for u in urls.values()])

    await wait_until(all_ready, WAIT_S, "both brokers ready")

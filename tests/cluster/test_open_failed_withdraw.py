"""A replica whose log fails to open leaves the ISR, and leadership goes elsewhere.

3 real brokers and a real etcd. Broker 1's data directory holds a plain file
where a new topic's partition directories go, so those logs cannot open
there (``Scrubber.open_failed``). Every partition of the topic must end up
led by another broker with broker 1 out of its ISR (broker 1 withdrew itself,
handing over the partitions it was elected to lead), acks=all producing must
work, and once the file is gone and broker 1 restarted its replicas open,
catch up and rejoin the ISR.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_helpers import partition_state, wait_until

from mq import Admin, Producer
from mq.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

TOPIC = "unopened"
PARTITIONS = 3
VICTIM = 1
OUT_WITHIN_S = 20.0
"""Bound on the withdrawal: an etcd write or a few (plus an election's)."""


async def _states(cluster: LocalCluster) -> list[dict[str, object]] | None:
    found = [await partition_state(cluster.bootstrap, TOPIC, i) for i in range(PARTITIONS)]
    return None if any(s is None for s in found) else found  # type: ignore[return-value]


async def test_a_log_that_fails_to_open_leaves_the_isr(cluster: LocalCluster) -> None:
    blockers: list[Path] = []
    for index in range(PARTITIONS):
        blocker = cluster.broker(VICTIM).data_dir / f"{TOPIC}-{index}"
        blocker.write_text("not a directory\n")
        blockers.append(blocker)
    async with Admin(bootstrap=cluster.bootstrap) as admin:
        await admin.create_topic(
            TOPIC,
            partitions=PARTITIONS,
            replication_factor=3,
            configs={"min.insync.replicas": "2"},
        )

    async def withdrawn() -> list[dict[str, object]] | None:
        states = await _states(cluster)
        if states is None:
            return None
        for state in states:
            if state["leader"] in (VICTIM, -1) or VICTIM in state["isr"]:  # type: ignore[operator]
                return None
        return states

    await wait_until(withdrawn, OUT_WITHIN_S, what=f"broker {VICTIM} out of every ISR")
    log_text = cluster.broker(VICTIM).log_path.read_text()  # type: ignore[union-attr]
    assert f"{TOPIC}-0 stays offline here" in log_text
    assert f"node {VICTIM} leaves the ISR" in log_text

    async with Producer(cluster.bootstrap, acks="all", delivery_timeout_ms=20_000) as producer:
        for index in range(PARTITIONS):
            for i in range(20):
                await (await producer.send(TOPIC, b"%d" % i, partition=index))

    for blocker in blockers:
        blocker.unlink()
    cluster.restart(VICTIM)

    async def all_in_sync() -> bool:
        states = await _states(cluster)
        return states is not None and all(len(s["isr"]) == 3 for s in states)  # type: ignore[arg-type]

    await wait_until(all_in_sync, 60, what=f"broker {VICTIM} back in every ISR")

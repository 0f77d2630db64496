"""A leader that lost its etcd session stops serving queue receives (issue 17, point 3).

A 3-broker cluster (real etcd, real ``mq serve`` processes). etcd is stopped: no broker
can refresh its registration lease, so after a session each knows it may have been
replaced, and must lease nothing more while still reachable by clients. etcd comes back:
the brokers register again (new broker epochs), the controller elects leaders in new
leader epochs, and the queue serves again with its state intact.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from cluster_helpers import CLUSTER_SETTINGS, partition_state, wait_until

from mq import QueueClient
from mq.client.connection import Connection
from mq.errors import MQError, NotLeaderOrFollowerError
from mq.local_cluster import LocalCluster
from mq.wire.apis_queues import QUEUE_RECEIVE

pytestmark = pytest.mark.slow

SESSION_S = int(CLUSTER_SETTINGS["session_timeout_ms"]) / 1000
NOTICE_S = SESSION_S * 2 + 5
"""A lease is lost once unrefreshed for a session (plus a refresh period and a call's
timeout): the leader must have noticed well within this."""


def _receive(queue: str) -> Any:
    """A receive that leases nothing (its filter matches no message) but needs a leader."""
    return {
        "group": queue,
        "consumer_id": "probe",
        "topics": [{"name": queue, "partitions": [0]}],
        "max_messages": 1,
        "max_wait_ms": 0,
        "visibility_timeout_ms": None,
        "max_bytes": 1 << 20,
        "filter": {"never": [b"matches"]},
    }


async def test_a_leader_without_its_session_stops_serving_receives(
    cluster: LocalCluster,
) -> None:
    queue = "sessions"
    async with QueueClient(cluster.bootstrap) as q:
        await q.create_queue(queue, partitions=1, replication_factor=3)
        for body in (b"acked", b"kept"):
            await q.send(queue, body)
        [first] = await q.receive(queue, max_messages=1, wait=5)
        await q.ack(first)
        state = await partition_state(cluster.bootstrap, queue, 0)
        assert state is not None
        leader = cluster.broker(state["leader"])

    conn = await Connection.open(leader.host, leader.port)
    try:
        answered = await conn.call(QUEUE_RECEIVE, _receive(queue))
        assert answered["topics"][0]["partitions"][0]["error"] == 0  # it leads, for now
        cluster.etcd.stop()
        try:
            deadline = time.monotonic() + NOTICE_S
            error = 0
            while error == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                answered = await conn.call(QUEUE_RECEIVE, _receive(queue))
                error = answered["topics"][0]["partitions"][0]["error"]
            assert error == NotLeaderOrFollowerError.code, "still serving without a session"
        finally:
            cluster.etcd.start()
    finally:
        conn.close()
        await conn.wait_closed()

    async with QueueClient(cluster.bootstrap) as q:

        async def kept() -> list[tuple[bytes | None, int]]:
            try:
                got = await q.receive(queue, max_messages=10, wait=1)
            except MQError:
                return []
            return [(m.body, m.delivery_count) for m in got]

        assert await wait_until(kept, timeout_s=40, what="the queue serving again") == [
            (b"kept", 1)
        ]

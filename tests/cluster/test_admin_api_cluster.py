"""The console's admin API on a 3-broker cluster: any broker answers for all of it.

Partitions led by other brokers get their offsets and records through peer calls,
a group is described by its coordinator wherever it is, and every broker gives the
same answers (sizes aside: a broker knows the sizes of its own replicas only). A
killed broker's partitions show as offline.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from typing import Any

import aiohttp
from cluster_helpers import wait_until

from mq import Admin, Consumer, Producer, TopicPartition
from mq.local_cluster import LocalCluster

TEST_TIMEOUT_S = 120
TOPIC = "spread"
COUNTS = (5, 6, 7)
GROUP = "readers"
COMMITTED = (5, 1, 3)


async def get(session: aiohttp.ClientSession, url: str, status: int = 200) -> Any:
    async with session.get(url) as response:
        assert response.status == status, await response.text()
        return await response.json()


async def workload(bootstrap: str) -> Consumer:
    async with Admin(bootstrap=bootstrap) as admin:
        await admin.create_topic(TOPIC, partitions=3, replication_factor=1)
    async with Producer(bootstrap) as producer:
        for p, count in enumerate(COUNTS):
            for i in range(count):
                await producer.send(TOPIC, b"%d-%d" % (p, i), partition=p)
    consumer = Consumer(
        TOPIC,
        bootstrap=bootstrap,
        group_id=GROUP,
        enable_auto_commit=False,
        heartbeat_interval_ms=100,
    )
    await consumer.start()
    while len(consumer.assignment()) < 3:
        await consumer.getmany(timeout_ms=100)
    await consumer.commit({TopicPartition(TOPIC, p): c for p, c in enumerate(COMMITTED)})
    return consumer


async def test_every_broker_answers_for_the_whole_cluster(http_cluster: LocalCluster) -> None:
    urls = {n: b.http_url for n, b in http_cluster.brokers.items()}
    async with asyncio.timeout(TEST_TIMEOUT_S), aiohttp.ClientSession() as session:
        consumer = await workload(http_cluster.bootstrap)
        try:
            async with Admin(bootstrap=http_cluster.bootstrap) as admin:
                described = await admin.describe_topic(TOPIC)
            leaders = {p.partition: p.leader for p in described.partitions}
            assert len(set(leaders.values())) > 1  # spread over brokers: peer calls needed
            for node, url in urls.items():
                cluster = await get(session, f"{url}/api/cluster")
                assert cluster["node_id"] == node
                assert [b["node_id"] for b in cluster["brokers"]] == [1, 2, 3]
                assert cluster["offline"] == []
                topic = await get(session, f"{url}/api/topics/{TOPIC}")
                parts = topic["partitions"]
                assert [p["end_offset"] for p in parts] == list(COUNTS)
                assert {p["partition"]: p["leader"] for p in parts} == leaders
                assert [p["consumed"] for p in parts] == list(COMMITTED)
                for p in parts:  # sizes of this broker's own replicas only
                    assert (p["size_bytes"] is not None) == (node in p["replicas"])
                group = await get(session, f"{url}/api/groups/{GROUP}")
                lag = [o["lag"] for o in group["offsets"] if o["topic"] == TOPIC]
                assert lag == [n - c for n, c in zip(COUNTS, COMMITTED, strict=True)]
                for index in range(3):
                    path = f"{url}/api/topics/{TOPIC}/partitions/{index}/records?limit=2"
                    records = (await get(session, path))["records"]
                    values = [base64.b64decode(r["value"]) for r in records]
                    count = COUNTS[index]
                    assert values == [b"%d-%d" % (index, i) for i in (count - 2, count - 1)]

            victim = next(n for n in leaders.values() if n != 1)  # ask broker 1 about it
            http_cluster.kill(victim)
            gone = [p for p, n in leaders.items() if n == victim]

            async def offline_shown() -> Any:
                cluster = await get(session, f"{urls[1]}/api/cluster")
                return sorted(p["partition"] for p in cluster["offline"]) == gone

            await wait_until(offline_shown, what=f"broker {victim}'s partitions offline")
            topic = await get(session, f"{urls[1]}/api/topics/{TOPIC}")
            for p in topic["partitions"]:
                if p["partition"] in gone:
                    assert p["leader"] is None
                    assert p["error"] == "LeaderNotAvailableError"
                else:
                    assert p["end_offset"] == COUNTS[p["partition"]]
            refused = await get(
                session, f"{urls[1]}/api/topics/{TOPIC}/partitions/{gone[0]}/records", 503
            )
            assert refused["error"] == "LeaderNotAvailableError"
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()

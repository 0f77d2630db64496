"""A single node is its own controller: each start is a new broker epoch, and it leads
its partitions again only in a new leader epoch (issue 17, point 2), after SIGKILL and
after a clean stop alike."""

from __future__ import annotations

import asyncio

from mq import Admin, Consumer, Producer, TopicPartition
from mq.local_cluster import BrokerProcess

TEST_TIMEOUT_S = 60


async def _epochs(bootstrap: str) -> dict[int, int]:
    async with Admin(bootstrap=bootstrap) as admin:
        response = await admin._client.fetch_all_metadata()
    for topic in response["topics"]:
        if topic["name"] == "epochs":
            return {p["partition"]: p["leader_epoch"] for p in topic["partitions"]}
    raise AssertionError("no topic")


async def test_each_start_leads_in_a_new_epoch(own_broker: BrokerProcess) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Admin(bootstrap=own_broker.bootstrap) as admin:
            await admin.create_topic("epochs", 2, 1)
        async with Producer(own_broker.bootstrap) as producer:
            for index in range(2):
                await (await producer.send("epochs", b"before", partition=index))
        first = await _epochs(own_broker.bootstrap)

        own_broker.kill()
        own_broker.start()
        second = await _epochs(own_broker.bootstrap)
        assert all(second[i] > first[i] for i in first), (first, second)

        own_broker.stop()
        own_broker.start()
        third = await _epochs(own_broker.bootstrap)
        assert all(third[i] > second[i] for i in first), (second, third)

        async with Producer(own_broker.bootstrap) as producer:
            for index in range(2):
                await (await producer.send("epochs", b"after", partition=index))
        async with Consumer(
            bootstrap=own_broker.bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([TopicPartition("epochs", 0)])
            got: list[bytes | None] = []
            while len(got) < 2:
                batches = await consumer.getmany(timeout_ms=1000)
                got += [r.value for records in batches.values() for r in records]
        assert got == [b"before", b"after"]

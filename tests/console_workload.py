"""A known workload for the admin API and console tests: a topic, a group, a queue.

* topic ``orders``: 3 partitions holding 10, 20 and 30 records (key ``order-<i>``,
  a JSON value, a ``source: test`` header);
* group ``billing``: one live member subscribed to ``orders``, committed offsets
  4, 20 and 0, so its lag is 6, 0 and 30;
* queue ``jobs`` (dead letters to ``jobs-dlq``): 8 messages sent, 1 of them
  delayed by an hour; 3 received, of which 1 acked and 1 rejected (dead-lettered):
  visible 4, in flight 1, delayed 1, acked 1, dead-lettered 1.

The consumer and the queue client stay open while the context lasts (the member
and the lease are live). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from mq import Admin, Consumer, Producer, QueueClient, TopicPartition

TOPIC = "orders"
COUNTS = (10, 20, 30)
GROUP = "billing"
COMMITTED = (4, 20, 0)
QUEUE = "jobs"
DLQ = "jobs-dlq"
WAIT_S = 30.0


def order_value(partition: int, i: int) -> bytes:
    return json.dumps({"order": i, "partition": partition, "item": "widget"}).encode()


@dataclass
class Workload:
    bootstrap: str
    consumer: Consumer
    queue: QueueClient

    @staticmethod
    def lag() -> list[int]:
        return [n - c for n, c in zip(COUNTS, COMMITTED, strict=True)]


async def _produce(bootstrap: str) -> None:
    async with Admin(bootstrap=bootstrap) as admin:
        await admin.create_topic(TOPIC, partitions=len(COUNTS), exist_ok=True)
    async with Producer(bootstrap) as producer:
        futures = [
            await producer.send(
                TOPIC,
                order_value(p, i),
                key=b"order-%d" % i,
                headers=[("source", b"test")],
                partition=p,
            )
            for p, count in enumerate(COUNTS)
            for i in range(count)
        ]
        await asyncio.gather(*futures)


async def _join_and_commit(bootstrap: str, consumer: Consumer) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(consumer.assignment()) < len(COUNTS):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the group got {consumer.assignment()}")
        await consumer.getmany(timeout_ms=100)
    await consumer.commit({TopicPartition(TOPIC, p): offset for p, offset in enumerate(COMMITTED)})


async def _queue_work(queue: QueueClient) -> None:
    await queue.create_queue(QUEUE, visibility_timeout=600, dead_letter_queue=DLQ)
    for i in range(7):
        await queue.send(QUEUE, b"job %d" % i)
    await queue.send(QUEUE, b"later", delay=3600)
    received = []
    deadline = time.monotonic() + WAIT_S
    while len(received) < 3:
        if time.monotonic() > deadline:
            raise TimeoutError(f"received {len(received)} of 3 messages")
        received += await queue.receive(QUEUE, max_messages=3 - len(received), wait=1)
    await queue.ack(received[0])
    await queue.reject(received[1])


@contextlib.asynccontextmanager
async def known_workload(bootstrap: str) -> AsyncIterator[Workload]:
    await _produce(bootstrap)
    consumer = Consumer(
        TOPIC,
        bootstrap=bootstrap,
        group_id=GROUP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=100,
    )
    async with consumer, QueueClient(bootstrap=bootstrap) as queue:
        await _join_and_commit(bootstrap, consumer)
        await _queue_work(queue)
        yield Workload(bootstrap, consumer, queue)

"""The least ACLs the README names are enough for the real clients (authorization on).

A real broker (in-process) with ``authorizer = "acl"``; every client connection
is ``User:ANONYMOUS`` until listeners authenticate, so the test grants that
principal, through the store the broker watches, exactly what the README's
table says each role needs, and runs the real client end to end:

* an idempotent producer: WRITE on its topic (init_producer_id's WRITE on some
  topic, KIP-679; metadata's DESCRIBE is implied by WRITE);
* a group consumer: READ on the topic and on the group;
* a queue: WRITE on the topic to send, READ on the topic and on the queue to
  receive and acknowledge.

Then one binding less each time is refused with the error that names it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from inprocess_broker import Running, running_broker

import mq
from mq.acl.model import AclBinding, Operation, Permission, ResourceType
from mq.broker.acl_store import delete_bindings, put_bindings
from mq.errors import GroupAuthorizationFailedError, MQError, TopicAuthorizationFailedError

ANON = "User:ANONYMOUS"
WAIT_S = 5.0


def allow(op: Operation, kind: ResourceType, name: str) -> AclBinding:
    return AclBinding(ANON, Permission.ALLOW, op, kind, name)


async def grant(running: Running, *bindings: AclBinding) -> None:
    await put_bindings(running.broker.store, bindings)
    cache = running.server.authorizer.cache
    assert await cache.wait_until(lambda: all(b in cache.index for b in bindings), WAIT_S)


async def revoke(running: Running, *bindings: AclBinding) -> None:
    await delete_bindings(running.broker.store, bindings)
    cache = running.server.authorizer.cache
    assert await cache.wait_until(lambda: not any(b in cache.index for b in bindings), WAIT_S)


async def test_producer_and_group_consumer_with_the_least_acls(tmp_path: Path) -> None:
    async with running_broker(
        tmp_path / "data", authorizer="acl", super_users=("root",), offsets_partitions=1
    ) as running:
        b = running.bootstrap
        write = allow(Operation.WRITE, ResourceType.TOPIC, "events")
        create = allow(Operation.CREATE, ResourceType.TOPIC, "events")
        await grant(running, create, write)
        async with mq.Admin(bootstrap=b) as admin:
            await admin.create_topic("events", 2, 1)
        async with mq.Producer(bootstrap=b, acks="all", enable_idempotence=True) as producer:
            for i in range(10):
                await producer.send_and_wait("events", b"v%d" % i, key=b"k%d" % i)
        read = allow(Operation.READ, ResourceType.TOPIC, "events")
        group = allow(Operation.READ, ResourceType.GROUP, "readers")
        await grant(running, read, group)
        async with mq.Consumer(
            "events", bootstrap=b, group_id="readers", auto_offset_reset="earliest"
        ) as consumer:
            got: list[bytes] = []
            for _ in range(20):
                batches = await consumer.getmany(timeout_ms=500)
                got += [r.value for records in batches.values() for r in records if r.value]
                if len(got) >= 10:
                    break
            assert sorted(got) == sorted(b"v%d" % i for i in range(10))
            await consumer.commit()

        await revoke(running, group)
        with pytest.raises(GroupAuthorizationFailedError, match="DESCRIBE group 'readers'"):
            async with mq.Consumer(
                "events", bootstrap=b, group_id="readers", auto_offset_reset="earliest"
            ) as consumer:
                await consumer.getmany(timeout_ms=2000)
        await revoke(running, write)
        with pytest.raises(MQError, match="User:ANONYMOUS is not authorized to WRITE topic"):
            async with mq.Producer(bootstrap=b, acks="all", enable_idempotence=False) as producer:
                await producer.send_and_wait("events", b"no")


async def test_a_queue_with_the_least_acls(tmp_path: Path) -> None:
    async with running_broker(
        tmp_path / "data", authorizer="acl", super_users=("root",), share_state_partitions=1
    ) as running:
        b = running.bootstrap
        needs = [
            allow(Operation.CREATE, ResourceType.TOPIC, "jobs"),
            allow(Operation.WRITE, ResourceType.TOPIC, "jobs"),
            allow(Operation.READ, ResourceType.TOPIC, "jobs"),
            allow(Operation.READ, ResourceType.QUEUE, "jobs"),
        ]
        await grant(running, *needs)
        async with mq.QueueClient(bootstrap=b) as q:
            await q.create_queue("jobs")
            await q.send("jobs", b"body")
            msgs = await q.receive("jobs", max_messages=10, wait=5)
            assert [m.body for m in msgs] == [b"body"]
            await q.ack(msgs[0])
        await revoke(running, needs[3])
        async with mq.QueueClient(bootstrap=b) as q:
            with pytest.raises(GroupAuthorizationFailedError, match="READ queue 'jobs'"):
                await q.receive("jobs", max_messages=1, wait=1)
        await revoke(running, needs[2])
        await grant(running, needs[3])
        async with mq.QueueClient(bootstrap=b) as q:
            with pytest.raises(TopicAuthorizationFailedError, match="READ topic 'jobs'"):
                await q.receive("jobs", max_messages=1, wait=1)

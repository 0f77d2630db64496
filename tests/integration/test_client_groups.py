"""Consumer groups through the client library against a real broker process.

Two members split the partitions; a third joining and one leaving rebalance
incrementally (only what moves is revoked, and a listener that commits on
revoke makes consumption exactly-once); commits and static membership;
admin group listing and offset reset. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Iterator

from broker_process import BrokerProcess
from client_helpers import admin

import mq
from mq import Consumer, Producer, TopicPartition
from mq.errors import TopicAlreadyExistsError

TEST_TIMEOUT_S = 30

# -- consumer groups -----------------------------------------------------------------------


def group_consumer(bootstrap: str, group: str, **kwargs: object) -> Consumer:
    return Consumer(
        "grouped",
        bootstrap=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        heartbeat_interval_ms=100,
        **kwargs,  # type: ignore[arg-type]
    )


async def produce_grouped(bootstrap: str, count: int) -> None:
    async with admin(bootstrap) as a:
        with contextlib.suppress(TopicAlreadyExistsError):
            await a.create_topic("grouped", partitions=4)
    async with Producer(bootstrap) as producer:
        for i in range(count):
            await producer.send("grouped", b"%d" % i, key=b"%d" % i)


async def test_two_members_split_the_partitions_and_read_everything_once(
    own_broker: BrokerProcess,
) -> None:
    bootstrap = own_broker.bootstrap
    async with asyncio.timeout(TEST_TIMEOUT_S):
        await produce_grouped(bootstrap, 400)
        seen: list[bytes | None] = []
        async with (
            group_consumer(bootstrap, "split") as one,
            group_consumer(bootstrap, "split") as two,
        ):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                for consumer in (one, two):
                    for records in (await consumer.getmany(timeout_ms=50)).values():
                        seen.extend(r.value for r in records)
                if len(seen) >= 400 and len(one.assignment()) == len(two.assignment()) == 2:
                    break
            assert one.assignment() | two.assignment() == {
                TopicPartition("grouped", p) for p in range(4)
            }
            assert len(one.assignment()) == len(two.assignment()) == 2
        assert sorted(seen) == sorted(b"%d" % i for i in range(400))  # each exactly once


class CommitOnRevoke(mq.ConsumerRebalanceListener):
    """Commits what was consumed of each partition it gives up; records every change.

    ``gate``, when the test sets one, makes a revocation wait for it (as a slow
    flush would), so that the test can watch the group in mid-rebalance.
    """

    def __init__(self, consumer: Consumer, clock: Iterator[int]) -> None:
        self.consumer = consumer
        self.clock = clock
        self.events: list[tuple[str, set[TopicPartition]]] = []
        self.revoking_since: int | None = None
        self.gate: asyncio.Event | None = None

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", revoked))
        self.revoking_since = next(self.clock)
        if self.gate is not None:
            await self.gate.wait()
        await self.consumer.commit({tp: await self.consumer.position(tp) for tp in revoked})

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", assigned))


class Member:
    """A consumer of the group that reads in a task of its own, with a commit-on-revoke listener.

    ``received`` holds (tick, record) for each record the application got; the
    ticks come from one counter shared with the listeners, so "after the
    revocation began" is exact, not a matter of clock resolution.
    """

    def __init__(self, bootstrap: str, topic: str, clock: Iterator[int]) -> None:
        self.topic = topic
        self.clock = clock
        self.consumer = Consumer(
            bootstrap=bootstrap,
            group_id="incremental",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy="sticky",
            heartbeat_interval_ms=100,
            fetch_max_wait_ms=100,
        )
        self.listener = CommitOnRevoke(self.consumer, clock)
        self.received: list[tuple[int, mq.ConsumerRecord]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe([self.topic], listener=self.listener)
        self._task = asyncio.create_task(self._consume())

    async def _consume(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=50)
            tick = next(self.clock)
            for records in batches.values():
                self.received.extend((tick, r) for r in records)

    def open_gate(self) -> None:
        if self.listener.gate is not None:
            self.listener.gate.set()

    async def stop(self) -> None:
        """Stop reading, then stop the consumer (its listener commits what it read)."""
        self.open_gate()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.consumer.stop()

    def received_since(self, tick: int) -> set[int]:
        """The partitions of the records received after ``tick``."""
        return {r.partition for t, r in self.received if t > tick}


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.02)


def settled(members: list[Member], partitions: set[TopicPartition]) -> bool:
    """The members own every partition, evenly (sizes that add up: no overlap)."""
    owned = [m.consumer.assignment() for m in members]
    share = len(partitions) // len(members)
    return [len(o) for o in owned] == [share] * len(members) and set().union(*owned) == partitions


async def test_a_third_consumer_joining_and_one_leaving_rebalance_incrementally(
    own_broker: BrokerProcess,
) -> None:
    """Two members share 6 partitions, a third joins, then the first leaves.

    Each rebalance moves only what it must: a member gives up only the
    partitions that go to another (its listener hears of nothing else) and
    keeps reading the rest while the newcomer waits for them. Revocations
    commit, so with records produced throughout, each is consumed exactly once.
    """
    bootstrap, topic = own_broker.bootstrap, "incremental"
    every = {TopicPartition(topic, p) for p in range(6)}
    clock = itertools.count()
    producing = asyncio.Event()

    async def produce() -> int:
        sent = 0
        async with Producer(bootstrap, linger_ms=5) as producer:
            while producing.is_set():
                for p in range(6):
                    await producer.send(topic, b"%d" % sent, partition=p)
                    sent += 1
                await asyncio.sleep(0.01)
        return sent

    async with asyncio.timeout(TEST_TIMEOUT_S), contextlib.AsyncExitStack() as cleanup:
        async with admin(bootstrap) as a:
            await a.create_topic(topic, partitions=6)
        producing.set()
        producer = asyncio.create_task(produce())
        cleanup.callback(producer.cancel)  # (if the test fails before it stops producing)
        one, two, three = members = [Member(bootstrap, topic, clock) for _ in range(3)]
        for m in members:
            cleanup.push_async_callback(m.stop)
        await one.start()
        await until(lambda: one.consumer.assignment() == every, "the first member has all")
        await two.start()
        await until(lambda: settled([one, two], every), "two members split the partitions")

        # -- a third joins ----------------------------------------------------------------------
        before = {m: m.consumer.assignment() for m in (one, two)}
        seen = {m: len(m.listener.events) for m in (one, two)}
        for m in (one, two):
            m.listener.gate = asyncio.Event()
            m.listener.revoking_since = None
        await three.start()
        await until(
            lambda: all(m.listener.revoking_since is not None for m in (one, two)),
            "both members are revoking a partition for the newcomer",
        )
        revoked = {m: m.listener.events[seen[m]][1] for m in (one, two)}
        kept = {m: {tp.partition for tp in before[m] - revoked[m]} for m in (one, two)}
        assert [len(r) for r in revoked.values()] == [1, 1]  # 3 + 3 -> 2 + 2 + 2
        # (c) While their revocations are under way, the kept partitions keep flowing:
        # each original member receives records of both partitions it keeps, and
        # none of the one it is giving up.
        for m in (one, two):
            since = m.listener.revoking_since or 0
            await until(lambda m=m, s=since: m.received_since(s) >= kept[m], "records flow")
            assert not m.received_since(since) - kept[m]
        assert three.consumer.assignment() == set()  # nothing is given twice
        for m in (one, two):
            m.open_gate()
        await until(lambda: settled(members, every), "three members split 2/2/2")
        # (a) balanced, and (b) nothing was revoked but the one partition each gave.
        for m in (one, two):
            assert m.listener.events[seen[m] :] == [("revoked", revoked[m])]
            assert m.consumer.assignment() == before[m] - revoked[m]
        assert three.consumer.assignment() == revoked[one] | revoked[two]
        assert all(kind == "assigned" for kind, _ in three.listener.events)

        # -- the first leaves ---------------------------------------------------------------------
        before = {m: m.consumer.assignment() for m in (two, three)}
        seen = {m: len(m.listener.events) for m in (two, three)}
        leaving = one.consumer.assignment()
        await one.stop()
        assert one.listener.events[-1] == ("revoked", leaving)  # it committed on the way out
        await until(lambda: settled([two, three], every), "two members split 3/3 again")
        for m in (two, three):
            assert all(kind == "assigned" for kind, _ in m.listener.events[seen[m] :])
            assert m.consumer.assignment() > before[m]

        # -- everything, exactly once -------------------------------------------------------------
        producing.clear()
        sent = await producer
        await until(lambda: sum(len(m.received) for m in members) >= sent, "all is consumed")
        await asyncio.sleep(0.2)  # time for a duplicate to show up
        values = [r.value for m in members for _, r in m.received]
        assert len(values) == sent
        assert set(values) == {b"%d" % i for i in range(sent)}


async def test_commits_and_static_membership(own_broker: BrokerProcess) -> None:
    bootstrap = own_broker.bootstrap
    async with asyncio.timeout(TEST_TIMEOUT_S):
        await produce_grouped(bootstrap, 100)
        static = {"group_instance_id": "host-1", "enable_auto_commit": False}
        async with group_consumer(bootstrap, "static", **static) as consumer:
            got = 0
            while got < 30:
                got += sum(
                    map(
                        len, (await consumer.getmany(timeout_ms=200, max_records=30 - got)).values()
                    )
                )
            await consumer.commit()
            committed = {tp: await consumer.committed(tp) for tp in consumer.assignment()}
            positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
            assert committed == positions
            assert sum(positions.values()) == 30
        async with admin(bootstrap) as a:  # a static member stays in the group after stop
            described = await a.describe_group("static")
            assert [m.group_instance_id for m in described.members] == ["host-1"]
            assert sum(o.lag or 0 for o in described.offsets) == 70
        async with group_consumer(bootstrap, "static", **static) as consumer:
            seen = []
            while len(seen) < 70:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    seen.extend(records)
            assert len({r.value for r in seen}) == 70
            assert len(consumer.assignment()) == 4


async def test_admin_group_listing_and_offset_reset(own_broker: BrokerProcess) -> None:
    bootstrap = own_broker.bootstrap
    async with asyncio.timeout(TEST_TIMEOUT_S):
        await produce_grouped(bootstrap, 40)
        async with group_consumer(bootstrap, "resettable") as consumer:
            total = 0
            while total < 40:
                total += sum(map(len, (await consumer.getmany(timeout_ms=200)).values()))
        async with admin(bootstrap) as a:
            assert ("resettable", "Empty") in await a.list_groups()
            described = await a.describe_group("resettable")
            assert sum(o.committed_offset for o in described.offsets) == 40
            assert await a.reset_offsets("resettable", "grouped", 3, partitions=[0]) == {
                TopicPartition("grouped", 0): 3
            }
            reset = await a.reset_offsets("resettable", "grouped", "earliest")
            assert set(reset.values()) == {0}
            lags = {o.partition: o.lag for o in (await a.describe_group("resettable")).offsets}
            assert sum(lag or 0 for lag in lags.values()) == 40

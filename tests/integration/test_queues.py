"""Queues (share groups) through :class:`mq.QueueClient` against a real broker process.

Many consumers share a large queue (every message acked exactly once); a consumer
that dies holding leases has its messages delivered again once the visibility
timeout ends; poison messages go to the dead-letter queue and come back with
redrive; delays (per message, per queue, on nack); FIFO per key; header filters;
dedup ids; extending and releasing leases, stale receipts, leases shorter than the
client's margin; purge and delete; several share groups on one topic; queue.fifo
altered on a live queue. Every wait is bounded; each test uses queues
of its own on the module's broker.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Mapping

import pytest

from mq import Admin, QueueClient, QueueMessage
from mq.errors import (
    InvalidConfigError,
    InvalidReceiptError,
    UnknownTopicOrPartitionError,
)
from mq.queues import headers as qh

TEST_TIMEOUT_S = 30
BIG_TIMEOUT_S = 240


def unique(prefix: str) -> str:
    """A queue name no other test (or earlier run on this broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def wait_until(
    cond: Callable[[], Awaitable[bool]], limit_s: float, interval: float = 0.05
) -> bool:
    """Poll ``cond`` until it holds (True) or ``limit_s`` seconds pass (False)."""
    deadline = time.monotonic() + limit_s
    while True:
        if await cond():
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval)


async def drain(
    q: QueueClient,
    queue: str,
    expected: int,
    limit_s: float = 10,
    *,
    ack: bool = True,
    visibility_timeout: float | None = None,
    filter: Mapping[str, str | list[str]] | None = None,
    group: str | None = None,
) -> list[QueueMessage]:
    """Receive (and ack) until ``expected`` messages came or ``limit_s`` passed; then one
    more short receive, so that extra deliveries would be seen too."""
    got: list[QueueMessage] = []
    deadline = time.monotonic() + limit_s

    async def once(wait: float) -> list[QueueMessage]:
        return await q.receive(queue, 100, wait, visibility_timeout, filter=filter, group=group)

    while len(got) < expected and time.monotonic() < deadline:
        batch = await once(0.5)
        got.extend(batch)
        if ack and batch:
            await q.ack(*batch)
    extra = await once(0.3)
    got.extend(extra)
    if ack and extra:
        await q.ack(*extra)
    return got


def bodies(messages: list[QueueMessage]) -> list[bytes]:
    out = []
    for m in messages:
        assert m.body is not None
        out.append(m.body)
    return out


# -- many consumers ------------------------------------------------------------------------


async def test_four_consumers_share_100k_messages_each_acked_exactly_once(
    bootstrap: str,
) -> None:
    total = 100_000
    queue = unique("big")
    async with asyncio.timeout(BIG_TIMEOUT_S):
        async with QueueClient(bootstrap) as sender:
            await sender.create_queue(queue, partitions=4, visibility_timeout=600)
            futures = [await sender.send_nowait(queue, b"%06d" % i) for i in range(total)]
            metas = await asyncio.gather(*futures)
        assert len({(m.partition, m.offset) for m in metas}) == total
        assert len({m.partition for m in metas}) == 4  # spread over the partitions

        acked: list[list[bytes]] = [[] for _ in range(4)]
        deliveries: Counter[int] = Counter()
        done = asyncio.Event()

        async def consume(index: int) -> None:
            async with QueueClient(bootstrap) as q:
                deadline = time.monotonic() + BIG_TIMEOUT_S - 30
                while not done.is_set() and time.monotonic() < deadline:
                    batch = await q.receive(queue, max_messages=200, wait=1)
                    if not batch:
                        continue
                    await q.ack(*batch)
                    deliveries.update(m.delivery_count for m in batch)
                    acked[index].extend(bodies(batch))
                    if sum(len(a) for a in acked) >= total:
                        done.set()

        await asyncio.gather(*(consume(i) for i in range(4)))

        every = list(itertools.chain.from_iterable(acked))
        counts = Counter(every)
        assert [b for b, n in counts.items() if n > 1] == []  # no message acked twice
        assert len(every) == total  # none missing
        assert set(every) == {b"%06d" % i for i in range(total)}
        assert deliveries == {1: total}  # no redelivery: the leases were long enough
        assert all(acked), [len(a) for a in acked]  # every consumer got some

        async with QueueClient(bootstrap) as q:
            attributes = await q.describe_queue(queue)
            assert attributes.acked == total
            assert attributes.visible == 0
            assert attributes.in_flight == 0
            assert attributes.delayed == 0
            assert attributes.partitions == 4
            assert await q.receive(queue, 10, wait=0.3) == []


# -- leases --------------------------------------------------------------------------------


async def test_messages_of_a_consumer_that_dies_are_delivered_again(bootstrap: str) -> None:
    queue = unique("dies")
    async with asyncio.timeout(TEST_TIMEOUT_S), QueueClient(bootstrap) as other:
        assert await other.create_queue(queue, partitions=2, visibility_timeout=60)
        assert not await other.create_queue(queue, partitions=1, exist_ok=True)
        for i in range(20):
            await other.send(queue, b"m%02d" % i)

        dying = QueueClient(bootstrap)
        await dying.start()
        held: list[QueueMessage] = []
        for _ in range(10):
            held += await dying.receive(queue, 8 - len(held), wait=2, visibility_timeout=1)
            if len(held) == 8:
                break
        assert len(held) == 8
        assert {m.delivery_count for m in held} == {1}
        await dying.close()  # never acks: its leases must run out by themselves
        lease_end = max(m.lease_deadline_ms for m in held) / 1000

        got: dict[bytes, tuple[QueueMessage, float]] = {}
        deadline = time.monotonic() + 10
        while len(got) < 20 and time.monotonic() < deadline:
            batch = await other.receive(queue, 100, wait=0.5)
            at = time.time()
            for m in batch:
                assert m.body is not None
                assert m.body not in got, "acked, yet delivered again"
                got[m.body] = (m, at)
            if batch:
                await other.ack(*batch)
        assert sorted(got) == sorted(b"m%02d" % i for i in range(20))
        for m in held:
            assert m.body is not None
            again, at = got[m.body]
            assert again.delivery_count == 2
            assert at >= m.lease_deadline_ms / 1000 - 0.01  # not before the lease ended
            assert at < lease_end + 5
        fresh = [m for m, _ in got.values() if m.body not in set(bodies(held))]
        assert {m.delivery_count for m in fresh} == {1}

        attributes = await other.describe_queue(queue)
        assert (attributes.acked, attributes.visible, attributes.in_flight) == (20, 0, 0)


# -- dead letters --------------------------------------------------------------------------


async def test_poison_messages_go_to_the_dead_letter_queue_and_redrive_brings_them_back(
    bootstrap: str,
) -> None:
    queue, dlq = unique("poison"), unique("poison-dlq")
    async with asyncio.timeout(TEST_TIMEOUT_S), QueueClient(bootstrap) as q:
        await q.create_queue(queue, visibility_timeout=30, max_deliveries=2, dead_letter_queue=dlq)
        await q.send(queue, b"poison", key=b"k1", headers={"kind": "bad"})

        for attempt in (1, 2):
            [message] = await q.receive(queue, 10, wait=5)
            assert (message.body, message.delivery_count) == (b"poison", attempt)
            await q.nack(message, error=f"boom {attempt}")
        assert await q.receive(queue, 10, wait=0.3) == []  # out of deliveries

        async def dead_lettered(n: int) -> bool:
            return (await q.describe_queue(queue)).dead_lettered == n

        assert await wait_until(lambda: dead_lettered(1), 5)

        # reject: straight to the dead-letter queue, at the first delivery
        await q.send(queue, b"hopeless")
        [message] = await q.receive(queue, 10, wait=5)
        assert (message.body, message.delivery_count) == (b"hopeless", 1)
        await q.reject(message, error="cannot parse")
        assert await wait_until(lambda: dead_lettered(2), 5)
        attributes = await q.describe_queue(queue)
        assert (attributes.visible, attributes.in_flight, attributes.acked) == (0, 0, 0)
        assert attributes.dead_lettering == 0

        letters = await drain(q, dlq, 2, limit_s=5, ack=False)
        assert sorted(bodies(letters)) == [b"hopeless", b"poison"]
        letter = next(m for m in letters if m.body == b"poison")
        assert letter.key == b"k1"
        assert qh.header(letter.headers, "kind") == b"bad"
        assert qh.header(letter.headers, qh.DLQ_TOPIC) == queue.encode()
        assert qh.header(letter.headers, qh.DLQ_PARTITION) == b"0"
        assert qh.header(letter.headers, qh.DLQ_OFFSET) == b"0"
        assert qh.header(letter.headers, qh.DLQ_DELIVERIES) == b"2"
        error = qh.header(letter.headers, qh.DLQ_ERROR)
        assert error is not None
        assert b"boom 2" in error
        rejected = next(m for m in letters if m.body == b"hopeless")
        assert qh.header(rejected.headers, qh.DLQ_TOPIC) == queue.encode()
        assert qh.header(rejected.headers, qh.DLQ_OFFSET) == b"1"
        assert qh.header(rejected.headers, qh.DLQ_DELIVERIES) == b"1"
        assert qh.header(rejected.headers, qh.DLQ_ERROR) == b"cannot parse"
        await q.nack(*letters)  # back in the dead-letter queue
        for look in (2, 3):  # more deliveries than the source queue allows: still kept
            again = await drain(q, dlq, 2, limit_s=5, ack=False)
            assert sorted((m.body, m.delivery_count) for m in again) == [
                (b"hopeless", look),
                (b"poison", look),
            ]
            await q.nack(*again)

        assert await q.redrive(dlq) == 2
        back = await drain(q, queue, 2, limit_s=5)
        assert sorted(bodies(back)) == [b"hopeless", b"poison"]
        for m in back:
            assert m.delivery_count == 1  # a new message: deliveries start again
            assert not any(name in qh.DLQ_HEADERS for name, _ in m.headers), m.headers
        assert qh.header(next(m for m in back if m.body == b"poison").headers, "kind") == b"bad"
        assert await q.receive(dlq, 10, wait=0.3) == []  # moved, not copied
        dlq_attributes = await q.describe_queue(dlq)
        assert dlq_attributes.acked == 2
        assert dlq_attributes.visible == dlq_attributes.in_flight == 0


async def test_a_short_lease_is_still_handed_out(bootstrap: str) -> None:
    """A lease shorter than the client's margin for kept messages: what a receive just
    got is returned (not dropped while its delivery counts)."""
    queue = unique("short")
    async with asyncio.timeout(TEST_TIMEOUT_S), QueueClient(bootstrap) as q:
        await q.create_queue(queue, visibility_timeout=30, max_deliveries=3)
        await q.send(queue, b"quick")
        got = await q.receive(queue, 10, wait=5, visibility_timeout=0.19)
        assert bodies(got) == [b"quick"]  # (delivery 1, unless this machine is very slow)
        again = await drain(q, queue, 1, limit_s=5)  # expired: delivered again
        assert [(m.body, m.delivery_count) for m in again] == [
            (b"quick", got[0].delivery_count + 1)
        ]


# -- delays --------------------------------------------------------------------------------


async def arrivals(
    q: QueueClient, queue: str, count: int, limit_s: float = 6
) -> dict[bytes, tuple[QueueMessage, float]]:
    """Poll (short long-polls) and ack until ``count`` messages came: each with the wall
    time its receive returned."""
    got: dict[bytes, tuple[QueueMessage, float]] = {}
    deadline = time.monotonic() + limit_s
    while len(got) < count and time.monotonic() < deadline:
        batch = await q.receive(queue, 10, wait=0.2)
        at = time.time()
        for m in batch:
            assert m.body is not None
            got[m.body] = (m, at)
        if batch:
            await q.ack(*batch)
    assert len(got) == count, sorted(got)
    return got


async def test_delayed_messages_are_not_received_before_their_time(bootstrap: str) -> None:
    queue, slow = unique("delay"), unique("delay-default")
    # lower bounds get 10 ms of slack: a record's timestamp is in whole milliseconds
    async with asyncio.timeout(TEST_TIMEOUT_S), QueueClient(bootstrap) as q:
        await q.create_queue(queue, visibility_timeout=30)
        await q.create_queue(slow, visibility_timeout=30, delay=2.0)

        # per message
        sent_at = time.time()
        await q.send(queue, b"later", delay=1.0)
        await q.send(queue, b"now")
        got = await arrivals(q, queue, 2)
        assert got[b"later"][1] - sent_at >= 0.99  # never before its delay
        assert got[b"now"][1] < got[b"later"][1]
        assert got[b"later"][0].delivery_count == 1
        assert got[b"later"][0].headers == []  # mq.delay.ms was the queue's, not the sender's

        # the queue's default delay
        sent_at = time.time()
        await q.send(slow, b"default")
        attributes = await q.describe_queue(slow)
        if time.time() - sent_at < 1.9:  # (unless this machine is very slow)
            assert (attributes.delayed, attributes.visible) == (1, 0)
        # ... which a message's own delay overrides
        await q.send(slow, b"short delay", delay=0.001)
        got = await arrivals(q, slow, 2)
        assert got[b"default"][1] - sent_at >= 1.99
        assert got[b"short delay"][1] < got[b"default"][1]

        # nack with a delay
        await q.send(queue, b"retry")
        [message] = await q.receive(queue, 10, wait=5)
        nacked_at = time.time()
        await q.nack(message, delay=1)
        got = await arrivals(q, queue, 1)
        again, at = got[b"retry"]
        assert at - nacked_at >= 0.99
        assert again.delivery_count == 2


# -- FIFO ------------------------------------------------------------------------------------


async def test_fifo_delivers_one_message_per_key_at_a_time_in_order(bootstrap: str) -> None:
    queue = unique("fifo")
    keys = [b"k%d" % k for k in range(6)]
    per_key = 25
    async with asyncio.timeout(TEST_TIMEOUT_S), QueueClient(bootstrap) as sender:
        await sender.create_queue(queue, partitions=2, visibility_timeout=60, fifo=True)
        sent: dict[bytes, list[bytes]] = defaultdict(list)
        futures = []
        for i in range(per_key):
            for key in keys:  # interleaved
                body = b"%s-%03d" % (key, i)
                sent[key].append(body)
                futures.append(await sender.send_nowait(queue, body, key=key))
        await asyncio.gather(*futures)

        in_flight: dict[bytes, bytes] = {}
        acked: dict[bytes, list[bytes]] = defaultdict(list)
        violations: list[str] = []
        total = per_key * len(keys)
        rng = random.Random(5)

        async def consume() -> None:
            async with QueueClient(bootstrap) as q:
                deadline = time.monotonic() + TEST_TIMEOUT_S - 5
                while sum(map(len, acked.values())) < total and time.monotonic() < deadline:
                    batch = await q.receive(queue, max_messages=5, wait=0.5)
                    for m in batch:
                        assert m.key is not None
                        if m.key in in_flight:
                            violations.append(f"{m.body!r} while {in_flight[m.key]!r} unacked")
                        assert m.body is not None
                        in_flight[m.key] = m.body
                    await asyncio.sleep(rng.uniform(0, 0.01))  # "processing"
                    for m in batch:
                        assert m.key is not None
                        assert m.body is not None
                        # done before the ack is sent: the broker may hand out the next
                        # of the key as soon as it has the ack
                        del in_flight[m.key]
                        acked[m.key].append(m.body)
                        await q.ack(m)

        await asyncio.gather(*(consume() for _ in range(3)))
        assert violations == []
        assert dict(acked) == dict(sent)  # per key: acked in the order sent, each once


async def test_queue_fifo_cannot_change_and_the_queue_goes_on(bootstrap: str) -> None:
    """As SQS: a queue is FIFO or not for life; altering ``queue.fifo`` is refused while
    the broker holds the queue's share state, which keeps serving."""
    queue = unique("switch")
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        QueueClient(bootstrap) as q,
        Admin(bootstrap=bootstrap) as admin,
    ):
        await q.create_queue(queue, visibility_timeout=30)
        for i in range(6):
            await q.send(queue, b"s%d" % i, key=b"k%d" % (i % 2))
        leased = await q.receive(queue, 2, wait=5, visibility_timeout=1)
        assert len(leased) == 2

        with pytest.raises(InvalidConfigError, match=r"queue\.fifo"):
            await admin.alter_configs(queue, {"queue.fifo": "true"})
        assert (await q.describe_queue(queue)).configs["queue.fifo"] == "false"
        await admin.alter_configs(queue, {"queue.visibility.timeout.ms": "20000"})

        got = await drain(q, queue, 6, limit_s=10)  # the two leases expire meanwhile
        assert sorted(bodies(got)) == [b"s%d" % i for i in range(6)]
        assert sorted(m.delivery_count for m in got) == [1, 1, 1, 1, 2, 2]


# -- filters ---------------------------------------------------------------------------------


async def test_a_filter_receives_only_matching_messages(bootstrap: str) -> None:
    queue = unique("filter")
    async with asyncio.timeout(TEST_TIMEOUT_S), QueueClient(bootstrap) as q:
        await q.create_queue(queue, partitions=2, visibility_timeout=30)
        for i in range(30):
            color = ("red", "blue", "green")[i % 3]
            await q.send(queue, b"%s-%02d" % (color.encode(), i), headers={"color": color})

        red = await drain(q, queue, 10, limit_s=5, filter={"color": "red"})
        assert len(red) == 10
        assert all(qh.header(m.headers, "color") == b"red" for m in red)
        assert await q.receive(queue, 10, wait=0.3, filter={"color": "red"}) == []
        assert await q.receive(queue, 10, wait=0.3, filter={"color": "purple"}) == []
        assert await q.receive(queue, 10, wait=0.3, filter={"shade": "red"}) == []

        green = await drain(q, queue, 10, limit_s=5, filter={"color": ["green", "red"]})
        assert sorted(bodies(green)) == sorted(b"green-%02d" % i for i in range(2, 30, 3))

        rest = await drain(q, queue, 10, limit_s=5)  # what filters skipped is still there
        assert sorted(bodies(rest)) == sorted(b"blue-%02d" % i for i in range(1, 30, 3))
        attributes = await q.describe_queue(queue)
        assert (attributes.acked, attributes.visible, attributes.in_flight) == (30, 0, 0)


# -- dedup -----------------------------------------------------------------------------------


async def test_a_dedup_id_is_delivered_once(bootstrap: str) -> None:
    queue = unique("dedup")
    async with asyncio.timeout(TEST_TIMEOUT_S), QueueClient(bootstrap) as q:
        await q.create_queue(queue, partitions=3, visibility_timeout=30)
        first = await q.send(queue, b"order 1", dedup_id="order-1")
        again = await q.send(queue, b"order 1 (retry)", dedup_id="order-1")
        await q.send(queue, b"order 2", dedup_id="order-2")
        assert first.partition == again.partition  # the id picks the partition
        got = await drain(q, queue, 2, limit_s=5)
        assert sorted(bodies(got)) == [b"order 1", b"order 2"]
        assert all(m.headers == [] for m in got)  # mq.dedup.id is the queue's, not shown
        attributes = await q.describe_queue(queue)
        assert attributes.deduplicated >= 1
        assert (attributes.acked, attributes.visible, attributes.in_flight) == (2, 0, 0)


# -- extend, release, stale receipts ------------------------------------------------------------


async def test_extend_keeps_a_lease_and_zero_releases_it(bootstrap: str) -> None:
    queue = unique("extend")
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        QueueClient(bootstrap) as q,
        QueueClient(bootstrap) as other,
    ):
        await q.create_queue(queue, visibility_timeout=30)
        await q.send(queue, b"long job")
        [message] = await q.receive(queue, 10, wait=5, visibility_timeout=1)
        await q.extend(message, 5)
        started = time.monotonic()
        assert await other.receive(queue, 10, wait=2) == []  # the 1 s lease was extended
        assert time.monotonic() - started >= 1.5
        await q.extend(message, 0)  # released at once
        started = time.monotonic()
        [again] = await other.receive(queue, 10, wait=5)
        assert time.monotonic() - started < 1
        assert (again.body, again.delivery_count) == (b"long job", 2)
        with pytest.raises(InvalidReceiptError):
            await q.ack(message)  # released: the old receipt holds nothing
        with pytest.raises(InvalidReceiptError):
            await q.extend(message, 10)
        await other.ack(again)
        await other.ack(again)  # a repeat of an ack that took effect succeeds (as SQS)
        with pytest.raises(InvalidReceiptError):
            await other.nack(again)  # but it was acked, not released


async def test_a_receipt_is_stale_once_its_lease_expired(bootstrap: str) -> None:
    queue = unique("stale")
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        QueueClient(bootstrap) as q,
        QueueClient(bootstrap) as other,
    ):
        await q.create_queue(queue, visibility_timeout=30)
        await q.send(queue, b"slow")
        [message] = await q.receive(queue, 10, wait=5, visibility_timeout=1)
        [again] = await other.receive(queue, 10, wait=5)  # after the lease ran out
        assert (again.body, again.delivery_count) == (b"slow", 2)
        with pytest.raises(InvalidReceiptError):
            await q.ack(message)
        with pytest.raises(InvalidReceiptError):
            await q.nack(message)
        await other.ack(again)  # the new receipt does
        attributes = await other.describe_queue(queue)
        assert (attributes.acked, attributes.visible, attributes.in_flight) == (1, 0, 0)


# -- purge, delete -----------------------------------------------------------------------------


async def test_purge_drops_everything_and_the_queue_goes_on(bootstrap: str) -> None:
    queue = unique("purge")
    async with asyncio.timeout(TEST_TIMEOUT_S), QueueClient(bootstrap) as q:
        await q.create_queue(queue, partitions=2, visibility_timeout=30)
        for i in range(20):
            await q.send(queue, b"old-%02d" % i)
        leased = await q.receive(queue, 5, wait=5)
        assert leased
        assert (await q.describe_queue(queue)).visible == 20 - len(leased)

        await q.purge_queue(queue)
        attributes = await q.describe_queue(queue)
        assert (attributes.visible, attributes.in_flight, attributes.delayed) == (0, 0, 0)
        assert await q.receive(queue, 10, wait=0.5) == []
        with pytest.raises(InvalidReceiptError):
            await q.ack(*leased)  # purged with the rest

        for i in range(5):
            await q.send(queue, b"new-%02d" % i)
        got = await drain(q, queue, 5, limit_s=5)
        assert sorted(bodies(got)) == [b"new-%02d" % i for i in range(5)]


async def test_a_deleted_or_missing_queue_cannot_be_received(bootstrap: str) -> None:
    queue = unique("deleted")
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with QueueClient(bootstrap) as q:
            await q.create_queue(queue, visibility_timeout=30)
            await q.send(queue, b"gone soon")
            assert queue in await q.list_queues()
            await q.delete_queue(queue)
            assert queue not in await q.list_queues()
        async with QueueClient(bootstrap) as q, asyncio.timeout(10):  # not the 30 s timeout
            with pytest.raises(UnknownTopicOrPartitionError):
                await q.receive(queue, 10, wait=1)
            with pytest.raises(UnknownTopicOrPartitionError):
                await q.receive(unique("never"), 10, wait=1)


# -- share groups ------------------------------------------------------------------------------


async def test_each_share_group_gets_every_message(bootstrap: str) -> None:
    queue = unique("groups")
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        QueueClient(bootstrap) as q,
        QueueClient(bootstrap) as r,
    ):
        await q.create_queue(queue, partitions=3, visibility_timeout=30)
        futures = [await q.send_nowait(queue, b"%03d" % i) for i in range(300)]
        await asyncio.gather(*futures)

        async def read(client: QueueClient, group: str) -> list[QueueMessage]:
            return await drain(client, queue, 300, limit_s=10, group=group)

        one, two = await asyncio.gather(read(q, "audit"), read(r, "billing"))
        expected = [b"%03d" % i for i in range(300)]
        assert sorted(bodies(one)) == expected
        assert sorted(bodies(two)) == expected
        assert {m.group for m in one} == {"audit"}
        for group in ("audit", "billing"):
            attributes = await q.describe_queue(queue, group=group)
            assert (attributes.acked, attributes.visible, attributes.in_flight) == (300, 0, 0)
        untouched = await q.describe_queue(queue)  # the queue's own group read nothing yet
        assert (untouched.acked, untouched.visible) == (0, 300)

"""Issue 18, F7: share groups a client creates by naming them are bounded and evicted.

A real broker in the test's event loop (:mod:`inprocess_broker`) serves real
queue requests; the tests count the share partitions its ShareManager keeps.
Nothing acknowledged may be lost: an evicted share group reloads its saved state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import Running, running_broker

from mq import Producer, QueueClient
from mq.broker.queues import ShareManager
from mq.broker.share_store import ShareKey
from mq.client.client import Client
from mq.errors import ShareSessionLimitReachedError, error_for_code
from mq.wire.apis_queues import QUEUE_RECEIVE

TEST_TIMEOUT_S = 60
PRESSURE_WAIT_S = 1.2
"""A little over PRESSURE_MIN_IDLE_S: after it, an unused session may be evicted."""


@asynccontextmanager
async def connect(bootstrap: str) -> AsyncIterator[Client]:
    client = Client(bootstrap)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def receive(client: Client, group: str, topic: str, max_messages: int = 1) -> Any:
    """One queue_receive of partition 0 (no wait): its partition result, error raised."""
    response = await client.call_any(
        QUEUE_RECEIVE,
        {
            "group": group,
            "consumer_id": "test",
            "topics": [{"name": topic, "partitions": [0]}],
            "max_messages": max_messages,
            "max_wait_ms": 0,
            "filter": {},
        },
    )
    result = response["topics"][0]["partitions"][0]
    if result["error"]:
        raise error_for_code(result["error"])(result["message"])
    return result


def manager(running: Running) -> ShareManager:
    queues = running.broker.queues
    assert queues is not None
    return queues


async def fill_queue(running: Running, name: str, count: int, size: int = 100) -> None:
    async with QueueClient(running.bootstrap) as q:
        await q.create_queue(name)
    async with Producer(running.bootstrap, linger_ms=5) as producer:
        for i in range(count):
            await producer.send(name, b"%08d" % i + b"x" * (size - 8))
        await producer.flush()


async def test_a_new_share_group_reads_only_what_its_receives_need(tmp_path: Path) -> None:
    """A share group named once on a queue of 20,000 messages: it used to read the
    whole window (4 MB of records, ~12 MB of memory per group) when it loaded."""
    async with asyncio.timeout(TEST_TIMEOUT_S), running_broker(tmp_path) as running:
        await fill_queue(running, "big", 20_000)
        async with connect(running.bootstrap) as client:
            for i in range(5):
                got = await receive(client, f"g{i}", "big")
                assert got["offsets"] == [0]
        for i in range(5):
            session = manager(running)._sessions.get(ShareKey(f"g{i}", "big", 0))
            assert session is not None
            assert session.share.end - session.share.start <= 2_000


async def test_share_sessions_per_broker_are_bounded(tmp_path: Path) -> None:
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        running_broker(tmp_path, max_share_sessions=3) as running,
        connect(running.bootstrap) as client,
    ):
        await fill_queue(running, "q", 10)
        for i in range(3):
            await receive(client, f"g{i}", "q")
        with pytest.raises(ShareSessionLimitReachedError, match="max_share_sessions"):
            await receive(client, "g3", "q")  # the others were used just now
        await asyncio.sleep(PRESSURE_WAIT_S)
        await receive(client, "g3", "q")  # the least recently used one made room
        assert len(manager(running)._sessions) == 3
        assert manager(running).evicted == 1
        assert manager(running)._sessions.get(ShareKey("g0", "q", 0)) is None


async def test_share_groups_per_partition_are_bounded(tmp_path: Path) -> None:
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        running_broker(tmp_path, max_share_groups_per_partition=2) as running,
        connect(running.bootstrap) as client,
    ):
        await fill_queue(running, "a", 10)
        await fill_queue(running, "b", 10)
        await receive(client, "g0", "a")
        await receive(client, "g1", "a")
        with pytest.raises(ShareSessionLimitReachedError, match="max_share_groups_per_partition"):
            await receive(client, "g2", "a")
        await receive(client, "g2", "b")  # another partition has room
        assert manager(running)._sessions.on_partition("a", 0) == 2


async def test_an_idle_share_group_is_evicted_and_keeps_its_acks(tmp_path: Path) -> None:
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        running_broker(tmp_path, share_session_idle_ms=300) as running,
    ):
        await fill_queue(running, "q", 10)
        key = ShareKey("q", "q", 0)
        async with QueueClient(running.bootstrap) as q:
            first = await q.receive("q", 4, 1)
            assert len(first) == 4
            await q.ack(*first)
            leased = await q.receive("q", 2, 1, visibility_timeout=60)  # held over eviction
            assert len(leased) == 2
            deadline = time.monotonic() + 10
            while manager(running)._sessions.get(key) is not None:
                assert time.monotonic() < deadline, "the idle share group was not evicted"
                await asyncio.sleep(0.05)
            assert manager(running).evicted >= 1
            rest = await q.receive("q", 10, 1)  # reloads from __share_state
            await q.ack(*leased)  # a lease taken before the eviction still settles
            await q.ack(*rest)
            bodies = sorted(int((m.body or b"")[:8]) for m in (*first, *leased, *rest))
            assert bodies == list(range(10))
            assert await q.receive("q", 10, 0.3) == []

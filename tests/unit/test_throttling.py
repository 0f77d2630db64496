"""Loop-time accounting of a handler (request_percentage), a connection's cached quota
charges, and the per-address connection-creation rate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from mq.broker.config import BrokerConfig
from mq.broker.quotas import QuotaManager, pack_values
from mq.broker.throttling import ClientQuotas, ConnectionRate, Timed
from mq.quotas import entities as q
from mq.quotas.entities import entity
from mq.replication.store import EventKind, WatchEvent
from mq.wire import apis_data


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def handler() -> str:
    spin(0.02)  # holds the loop
    await asyncio.sleep(0.2)  # waits: not the loop's time
    spin(0.02)
    return "done"


async def test_timed_counts_the_steps_not_the_waits() -> None:
    timed = Timed(handler())
    started = time.perf_counter()
    assert await timed == "done"
    assert time.perf_counter() - started >= 0.24
    assert 0.04 <= timed.spent < 0.2  # the 0.2 s wait not counted (slack: a loaded CPU)


async def test_timed_passes_errors_and_cancellation_through() -> None:
    async def failing() -> None:
        spin(0.01)
        await asyncio.sleep(0)
        raise ValueError("bad")

    timed = Timed(failing())
    with pytest.raises(ValueError, match="bad"):
        await timed
    assert timed.spent >= 0.01

    async def waiting() -> None:
        await asyncio.sleep(10)

    task = asyncio.ensure_future(_run(waiting()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _run(work: Coroutine[Any, Any, None]) -> None:
    await Timed(work)


def test_connection_rate_per_address() -> None:
    rate = ConnectionRate(10)
    waits = [rate.admit("10.0.0.1", 0.0) for _ in range(15)]
    assert waits[:10] == [0.0] * 10  # a second's worth at once
    assert waits[10:] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert rate.admit("10.0.0.2", 0.0) == 0.0  # another address: its own bucket
    assert rate.admit("10.0.0.1", 2.0) == 0.0
    assert ConnectionRate(0).admit("10.0.0.1", 0.0) == 0.0  # off


def _manager(**values: float) -> QuotaManager:
    manager = QuotaManager(None, BrokerConfig())  # type: ignore[arg-type]
    event = WatchEvent(EventKind.PUT, q.store_key(entity("alice")), pack_values(values), 1)
    manager.apply(event)
    return manager


def test_client_quotas_resolve_once_until_something_changes() -> None:
    manager = _manager(producer_byte_rate=1000, request_percentage=50)
    quotas = ClientQuotas(manager)
    charges = quotas.lookup("User:alice", "app", 0.0)
    assert charges is not None
    assert charges.produce is not None
    assert charges.loop_time is not None
    assert charges.fetch is None
    assert quotas.lookup("User:alice", "app", 1.0) is charges  # cached: same object
    assert quotas.lookup("User:bob", "app", 1.0) is None  # no quota applies to bob
    assert quotas.lookup("User:alice", "other", 1.0) is not charges  # resolved again
    again = quotas.lookup("User:alice", "app", 1.0)
    assert again is not None
    assert again.produce is charges.produce
    event = WatchEvent(EventKind.PUT, q.store_key(entity("alice")), pack_values({}), 2)
    manager.apply(event)  # the quotas changed: the cache is stale
    assert quotas.lookup("User:alice", "app", 2.0) is None


def test_charges_record_bytes_and_loop_time_even_for_errors() -> None:
    manager = _manager(producer_byte_rate=1000, consumer_byte_rate=1000, request_percentage=10)
    quotas = ClientQuotas(manager)
    charges = quotas.lookup("User:alice", None, 0.0)
    assert charges is not None
    produce, fetch = apis_data.PRODUCE.key, apis_data.FETCH.key
    assert charges.charge(produce, 1500, b"", 0.0, 0.0) == pytest.approx(0.5)
    assert charges.charge(fetch, 0, [b"x" * 1000, b"y" * 1000], 0.0, 0.0) == pytest.approx(1.0)
    # 0.1 s of loop per second, 0.1 s deep: 0.2 s of loop is 1 s of debt
    assert charges.charge(0, 0, b"", 0.2, 0.0) == pytest.approx(1.0)
    # a refused produce counts its bytes too; the wait is capped
    cap = manager.max_throttle_s
    assert quotas.charge_refused("User:alice", None, produce, 10**12, 0.0, 0.0) == cap
    assert quotas.charge_refused("User:bob", None, produce, 10**12, 0.0, 0.0) == 0.0

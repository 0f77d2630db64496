"""Loop-time accounting of a handler (request_percentage) and the per-address
connection-creation rate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from mq.broker.throttling import ConnectionRate, Timed


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
    assert 0.04 <= timed.spent < 0.1


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

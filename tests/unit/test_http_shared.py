"""SharedAnswers: one computation per key while in progress and while fresh."""

from __future__ import annotations

import asyncio

import pytest

from mq.http.shared import SharedAnswers


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_concurrent_and_fresh_requests_share_one_computation() -> None:
    clock = Clock()
    shared = SharedAnswers(ttl_s=1.0, clock=clock)
    calls = 0
    gate = asyncio.Event()

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await gate.wait()
        return calls

    waiting = [asyncio.create_task(shared.get("/api/x", compute)) for _ in range(10)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*waiting) == [1] * 10
    clock.now += 0.5
    assert await shared.get("/api/x", compute) == 1  # still fresh
    assert await shared.get("/api/y", compute) == 2  # another key
    clock.now += 0.6
    assert await shared.get("/api/x", compute) == 3  # expired: computed again
    assert calls == 3


async def test_an_error_is_shared_and_a_cancelled_waiter_does_not_cancel_it() -> None:
    clock = Clock()
    shared = SharedAnswers(ttl_s=1.0, clock=clock)
    gate = asyncio.Event()
    calls = 0

    async def failing() -> int:
        nonlocal calls
        calls += 1
        await gate.wait()
        raise ValueError("broker gone")

    first = asyncio.create_task(shared.get("k", failing))
    second = asyncio.create_task(shared.get("k", failing))
    await asyncio.sleep(0)
    first.cancel()  # its client went away
    gate.set()
    with pytest.raises(ValueError, match="broker gone"):
        await second
    assert first.cancelled()
    with pytest.raises(ValueError, match="broker gone"):
        await shared.get("k", failing)  # the error is fresh for a second, too
    assert calls == 1


async def test_keys_are_bounded() -> None:
    clock = Clock()
    shared = SharedAnswers(ttl_s=1.0, max_keys=3, clock=clock)

    async def value() -> str:
        return "v"

    for i in range(10):
        assert await shared.get(f"/api/topics/t{i}", value) == "v"
    assert len(shared) == 3  # past the cap, computed per request and not kept
    clock.now += 2
    assert await shared.get("/api/topics/new", value) == "v"
    assert len(shared) == 1  # expired answers dropped to make room

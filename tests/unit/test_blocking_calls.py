"""The writers' blocking calls run in one thread, coalesced, each caller getting its own
result (mq.storage.blocking, issue 18)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mq.errors import StorageError
from mq.storage.blocking import BATCH_CALLS, BLOCKING_THREADS, BlockingCalls, blocking_calls


async def test_calls_queued_in_one_turn_go_to_the_thread_together() -> None:
    calls = BlockingCalls(asyncio.get_running_loop())
    threads: set[str] = set()

    def double(n: int) -> int:
        threads.add(threading.current_thread().name)
        return 2 * n

    count = BATCH_CALLS * 2 + 1
    futures = [calls.submit(double, n) for n in range(count)]
    assert await asyncio.gather(*futures) == [2 * n for n in range(count)]
    assert calls.batches == 3  # 64 + 64 + 1: not one trip per call
    assert len(threads) == BLOCKING_THREADS
    assert threading.current_thread().name not in threads


async def test_a_failing_call_fails_its_caller_only() -> None:
    calls = BlockingCalls(asyncio.get_running_loop())

    def fail(message: str) -> None:
        raise StorageError(message)

    def bug(_: None) -> None:
        raise ZeroDivisionError

    ok = calls.submit(str, 1)
    failed = calls.submit(fail, "disk gone")
    buggy = calls.submit(bug, None)
    after = calls.submit(str, 2)
    assert await ok == "1"
    with pytest.raises(StorageError, match="disk gone"):
        await failed
    with pytest.raises(ZeroDivisionError):
        await buggy
    assert await after == "2"


async def test_a_cancelled_call_is_not_run_and_the_others_keep_their_results() -> None:
    calls = BlockingCalls(asyncio.get_running_loop())
    ran: list[int] = []
    release = threading.Event()

    def first(n: int) -> int:
        release.wait(30)
        ran.append(n)
        return n

    def record(n: int) -> int:
        ran.append(n)
        return n

    running = calls.submit(first, 0)  # holds the thread
    await asyncio.sleep(0)  # its batch leaves
    queued = [calls.submit(record, n) for n in range(1, 5)]
    queued[1].cancel()  # before it runs: skipped
    release.set()
    assert await running == 0
    results = await asyncio.gather(*queued, return_exceptions=True)
    assert results[0] == 1
    assert results[2:] == [3, 4]
    assert isinstance(results[1], asyncio.CancelledError)
    assert ran == [0, 1, 3, 4]


async def test_a_caller_that_gives_up_while_its_call_runs_does_not_shift_the_others() -> None:
    calls = BlockingCalls(asyncio.get_running_loop())
    started = threading.Event()
    release = threading.Event()

    def slow(n: int) -> int:
        started.set()
        release.wait(30)
        return n

    futures = [calls.submit(slow, 0), calls.submit(str, 1), calls.submit(str, 2)]
    assert await asyncio.to_thread(started.wait, 30)
    futures[0].cancel()  # it runs already: its result is dropped, the others' kept
    release.set()
    assert await asyncio.gather(*futures[1:]) == ["1", "2"]


async def test_each_loop_has_its_own() -> None:
    mine = blocking_calls()
    assert blocking_calls() is mine
    other = await asyncio.to_thread(asyncio.run, _other_loops())
    assert other is not mine


async def _other_loops() -> BlockingCalls:
    calls = blocking_calls()
    assert await calls.submit(len, "abc") == 3
    return calls

"""The broker-wide admission bookkeeping (mq.broker.admission), no sockets."""

from __future__ import annotations

import logging

import pytest

from mq.broker.admission import (
    SMALL_RESERVATION_BYTES,
    ConnectionCounts,
    MemoryBudget,
    RateLimitedLog,
)


class Waiter:
    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.granted: list[int] = []

    def budget_granted(self, size: int) -> None:
        self.granted.append(size)


def test_the_budget_refuses_what_does_not_fit_and_counts_forced_bytes() -> None:
    budget = MemoryBudget(100)
    assert budget.try_take(60)
    assert not budget.try_take(41)
    assert budget.try_take(40)
    budget.force(30)  # already in memory: counted beyond the limit
    assert budget.used == 130
    assert not budget.try_take(1)
    budget.force(-30)
    budget.release(100)
    assert budget.used == 0


def test_waiters_are_granted_whole_in_arrival_order() -> None:
    budget = MemoryBudget(100)
    assert budget.try_take(90)
    big, small = Waiter(budget), Waiter(budget)
    budget.wait(big, 50)
    budget.wait(small, 5)
    assert not budget.try_take(11)  # does not fit
    budget.release(30)  # 60 used: big (50) does not fit yet, small waits behind it
    assert big.granted == []
    assert small.granted == []
    budget.release(20)  # 40 used: big fits, then small
    assert big.granted == [50]
    assert small.granted == [5]
    assert budget.used == 95
    assert budget.waiting == 0


def test_a_waiter_that_fits_at_once_is_granted_at_once_and_cancel_moves_the_line() -> None:
    budget = MemoryBudget(100)
    first = Waiter(budget)
    budget.wait(first, 10)
    assert first.granted == [10]
    assert budget.try_take(90)
    gone, next_ = Waiter(budget), Waiter(budget)
    budget.wait(gone, 80)
    budget.wait(next_, 10)
    budget.release(20)
    assert next_.granted == []  # behind gone
    budget.cancel(gone)
    assert next_.granted == [10]
    assert gone.granted == []


def test_connection_counts_bound_the_total_and_each_address() -> None:
    counts = ConnectionCounts(max_total=3, max_per_address=2)
    assert counts.admit("a") is None
    assert counts.admit("a") is None
    refusal = counts.admit("a")
    assert refusal is not None
    assert "max_connections_per_ip" in refusal
    assert counts.admit("b") is None
    refusal = counts.admit("c")
    assert refusal is not None
    assert "max_connections" in refusal
    counts.release("a")
    assert counts.from_address("a") == 1
    assert counts.admit("c") is None
    assert counts.total == 3
    for address in ("a", "b", "c"):
        counts.release(address)
    assert counts.total == 0
    assert counts.from_address("a") == 0


def test_a_rate_limited_log_says_how_many_lines_it_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    logger = logging.getLogger("test.admission")
    limited = RateLimitedLog(logger, logging.WARNING, 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.admission"):
        for i in range(100):
            limited("refused %d", i)
        now[0] = 10.5
        limited("refused %d", 100)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refused 0", "refused 100 (and 99 more like it since the last such line)"]


def test_only_small_reservations_pass_the_line_and_only_if_they_fit() -> None:
    budget = MemoryBudget(10 * SMALL_RESERVATION_BYTES)
    assert budget.try_take(6 * SMALL_RESERVATION_BYTES)
    big = Waiter(budget)
    budget.wait(big, 5 * SMALL_RESERVATION_BYTES)
    assert big.granted == []
    assert not budget.try_take(SMALL_RESERVATION_BYTES + 1)  # fits, but waits its turn
    assert budget.try_take(SMALL_RESERVATION_BYTES)  # an ordinary request passes
    assert budget.try_take(3 * SMALL_RESERVATION_BYTES) is False
    budget.release(SMALL_RESERVATION_BYTES)
    assert big.granted == []
    budget.release(SMALL_RESERVATION_BYTES)
    assert big.granted == [5 * SMALL_RESERVATION_BYTES]

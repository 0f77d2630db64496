"""The per-broker circuit breaker (pure, on a fake clock) and bootstrap parsing."""

from __future__ import annotations

import pytest

from mq.client.breaker import DEFAULT_PORT, CircuitBreaker, parse_bootstrap


def test_opens_after_consecutive_failures_only() -> None:
    breaker = CircuitBreaker(failure_threshold=3, cooldown_s=10)
    breaker.record_failure(0)
    breaker.record_failure(0)
    breaker.record_success()  # resets the count
    breaker.record_failure(1)
    breaker.record_failure(1)
    assert breaker.state == CircuitBreaker.CLOSED
    assert breaker.allow(1)
    breaker.record_failure(2)
    assert breaker.state == CircuitBreaker.OPEN
    assert not breaker.allow(2)
    assert not breaker.allow(11.9)
    assert breaker.retry_after(5) == pytest.approx(7)


def test_half_open_lets_one_trial_through() -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=5)
    breaker.record_failure(0)
    assert breaker.allow(5)  # the trial
    assert breaker.state == CircuitBreaker.HALF_OPEN
    assert not breaker.allow(6)  # nobody else while the trial runs
    breaker.record_failure(6)  # the trial failed: open for another cooldown
    assert breaker.state == CircuitBreaker.OPEN
    assert not breaker.allow(10.9)
    assert breaker.allow(11)
    breaker.record_success()
    assert breaker.state == CircuitBreaker.CLOSED
    assert breaker.allow(11)
    assert breaker.failures == 0


def test_a_lost_trial_is_forgotten_after_a_cooldown() -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=5)
    breaker.record_failure(0)
    assert breaker.allow(5)
    assert not breaker.allow(9)
    assert breaker.allow(10)  # the first trial never reported back


def test_breaker_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        CircuitBreaker(failure_threshold=0)


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2,c") == [("a", 1), ("b", 2), ("c", DEFAULT_PORT)]
    assert parse_bootstrap(["[::1]:9000", "[fe80::1]"]) == [
        ("::1", 9000),
        ("fe80::1", DEFAULT_PORT),
    ]
    for bad in ("", " , ", "a:x", "a:0", ":9", "a:70000"):
        with pytest.raises(ValueError, match="bootstrap"):
            parse_bootstrap(bad)

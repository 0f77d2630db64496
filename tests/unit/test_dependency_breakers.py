"""Circuit breakers on the broker's outgoing calls: fail fast after a threshold, one
trial after the cool-down, state changes logged and reported to the hook."""

from __future__ import annotations

import logging

import pytest

from mq.errors import MQError, NetworkError, NotLeaderOrFollowerError
from mq.replication.breakers import Breakers


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def failing() -> int:
    raise NetworkError("connection refused")


async def answering() -> int:
    return 7


async def refusing() -> int:
    raise NotLeaderOrFollowerError("not the leader")  # an answer: the peer is up


def unavailable(message: str) -> MQError:
    return NetworkError(message)


async def test_a_failing_dependency_fails_fast_then_gets_a_trial(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    changes: list[tuple[str, str, str]] = []
    breakers = Breakers(
        threshold=3, cooldown_s=2.0, clock=clock, on_change=lambda *c: changes.append(c)
    )
    calls = 0

    async def counted() -> int:
        nonlocal calls
        calls += 1
        return await failing()

    caplog.set_level(logging.INFO, logger="mq.replication.breakers")
    for _ in range(3):
        with pytest.raises(NetworkError, match="connection refused"):
            await breakers.call("peer a", counted, (NetworkError,), unavailable)
    assert breakers.state("peer a") == "open"
    with pytest.raises(NetworkError, match="circuit breaker open"):
        await breakers.call("peer a", counted, (NetworkError,), unavailable)
    assert calls == 3  # failed fast: not called
    assert breakers.state("peer b") == "closed"  # other dependencies are not affected
    clock.now = 2.5
    with pytest.raises(NetworkError, match="connection refused"):  # the trial fails
        await breakers.call("peer a", counted, (NetworkError,), unavailable)
    assert calls == 4
    assert breakers.state("peer a") == "open"
    clock.now = 5.0
    assert await breakers.call("peer a", answering, (NetworkError,), unavailable) == 7
    assert breakers.state("peer a") == "closed"
    assert changes == [
        ("peer a", "closed", "open"),
        ("peer a", "open", "half-open"),
        ("peer a", "half-open", "open"),
        ("peer a", "open", "half-open"),
        ("peer a", "half-open", "closed"),
    ]
    assert "circuit breaker for peer a: closed -> open" in caplog.text


async def test_error_answers_do_not_count_as_failures() -> None:
    breakers = Breakers(threshold=2, clock=Clock())
    for _ in range(5):
        with pytest.raises(NotLeaderOrFollowerError):
            await breakers.call("peer a", refusing, (NetworkError,), unavailable)
    assert breakers.state("peer a") == "closed"
    with pytest.raises(NetworkError):
        await breakers.call("peer a", failing, (NetworkError,), unavailable)
    with pytest.raises(NotLeaderOrFollowerError):  # resets the count
        await breakers.call("peer a", refusing, (NetworkError,), unavailable)
    with pytest.raises(NetworkError):
        await breakers.call("peer a", failing, (NetworkError,), unavailable)
    assert breakers.state("peer a") == "closed"

"""``spark_connector.retry``: retriable errors retried for a bounded time, others raised."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from mq.errors import InvalidTopicError, NetworkError
from spark_connector.retry import RetryTimeoutError, retrying


def failing(times: int, error: Exception) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "done"

    return calls, call


def test_retriable_errors_are_retried_until_the_call_succeeds() -> None:
    calls, call = failing(3, NetworkError("connection refused"))
    errors: list[int] = []
    assert retrying("reading", 10_000, call, lambda: errors.append(1)) == "done"
    assert len(calls) == 4
    assert len(errors) == 3  # on_error after each failure (e.g. to drop a broken client)


def test_a_non_retriable_error_is_raised_at_once() -> None:
    calls, call = failing(5, InvalidTopicError("bad name"))
    with pytest.raises(InvalidTopicError):
        retrying("reading", 10_000, call)
    assert len(calls) == 1


def test_retrying_gives_up_after_the_timeout_naming_what_and_why() -> None:
    calls, call = failing(10**6, NetworkError("connection refused"))
    began = time.monotonic()
    with pytest.raises(
        RetryTimeoutError, match=r"planning: still failing after retryTimeoutMs=300"
    ):
        retrying("planning", 300, call)
    assert 0.3 <= time.monotonic() - began < 5
    assert 2 <= len(calls) < 20

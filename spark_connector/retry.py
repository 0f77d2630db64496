"""Retrying what a broker restart or a leader failover interrupts, for a bounded time.

A Spark task reading a range, and the driver planning a micro-batch, talk to
the cluster through the blocking client. While a broker restarts or a
partition's leader moves, calls fail with retriable errors (``NetworkError``,
``LeaderNotAvailable``, ``NotLeaderOrFollower``, timeouts...). :func:`retrying`
calls again, with a growing pause, until the call succeeds or ``retryTimeoutMs``
(:data:`~spark_connector.options.RETRY_TIMEOUT_MS` by default) has passed since
the first failure; then it raises :class:`RetryTimeoutError` naming what it
was doing and the last error. A non-retriable error is raised at once.

Offsets are never guessed across a retry: a task resumes at the offset after
the last record it handed to Spark, and the driver's offsets are those of
Spark's checkpoint, so a retried call cannot skip or repeat a record.

Not thread-safe state of its own: each call is independent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final, TypeVar

from mq.errors import MQError

T = TypeVar("T")

log = logging.getLogger(__name__)

FIRST_BACKOFF_S: Final = 0.1
"""The first pause after a retriable error: short, a leader move often settles in it."""
MAX_BACKOFF_S: Final = 1.0
"""The longest pause between attempts: a restarted broker is used within a second of
answering again, and a 30 s budget still makes ~30 attempts."""


class RetryTimeoutError(RuntimeError):
    """Retriable errors went on for longer than ``retryTimeoutMs``."""


def retrying(
    what: str,
    timeout_ms: int,
    call: Callable[[], T],
    on_error: Callable[[], None] | None = None,
) -> T:
    """``call()``, again after each retriable :class:`~mq.errors.MQError` for up to
    ``timeout_ms`` after the first; ``on_error`` runs after each failure (e.g. to drop a
    client whose connections the failure broke)."""
    deadline: float | None = None
    backoff = FIRST_BACKOFF_S
    while True:
        try:
            return call()
        except MQError as exc:
            if not exc.retriable:
                raise
            if on_error is not None:
                on_error()
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout_ms / 1000
            if now >= deadline:
                raise RetryTimeoutError(
                    f"{what}: still failing after retryTimeoutMs={timeout_ms}: {exc}"
                ) from exc
            log.info("mq-spark: %s failed (%s), retrying", what, exc)
            time.sleep(min(backoff, max(0.0, deadline - now)))
            backoff = min(backoff * 2, MAX_BACKOFF_S)

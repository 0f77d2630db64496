"""Circuit breakers for the broker's own outgoing calls: etcd, the controller, peers.

A dependency that keeps failing (etcd unreachable, a peer broker that does not
answer) should not make every request that needs it wait out its timeout:
after ``threshold`` consecutive failures its breaker opens and calls fail at
once with the dependency's own retriable error; after ``cooldown_s`` one
trial call goes through (half-open), whose outcome closes or reopens it
(:class:`~mq.client.breaker.CircuitBreaker`, the client's per-broker breaker,
is the state machine). Every state change is logged, and passed to an
optional hook (for metrics).

Only failures to reach the dependency count (the errors named by the
caller: connection errors and timeouts); an error *answer* means the
dependency is up.

Thread safety: one event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from mq.client.breaker import CircuitBreaker
from mq.errors import MQError

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_THRESHOLD: Final = 5
"""Consecutive failures that open a dependency's breaker (the client's default)."""
DEFAULT_COOLDOWN_S: Final = 1.0
"""How long an open breaker fails calls at once before one trial goes through: short,
since the broker's own retries (metadata watch, forwarding) come every 0.1 to 1 s."""

StateHook = Callable[[str, str, str], None]
"""(dependency, old state, new state)."""


class Breakers:
    """One breaker per named dependency (``etcd 127.0.0.1:2379``, ``peer host:port``)."""

    def __init__(
        self,
        *,
        threshold: int = DEFAULT_THRESHOLD,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        on_change: StateHook | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.on_change = on_change
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def state(self, name: str) -> str:
        found = self._breakers.get(name)
        return CircuitBreaker.CLOSED if found is None else found.state

    def _get(self, name: str) -> CircuitBreaker:
        found = self._breakers.get(name)
        if found is None:
            found = self._breakers[name] = CircuitBreaker(self.threshold, self.cooldown_s)
        return found

    def _changed(self, name: str, old: str, new: str) -> None:
        if old == new:
            return
        level = logging.WARNING if new == CircuitBreaker.OPEN else logging.INFO
        log.log(level, "circuit breaker for %s: %s -> %s", name, old, new)
        if self.on_change is not None:
            self.on_change(name, old, new)

    async def call(
        self,
        name: str,
        work: Callable[[], Awaitable[T]],
        failures: tuple[type[BaseException], ...],
        fail_fast: Callable[[str], MQError],
    ) -> T:
        """``await work()`` unless ``name``'s breaker is open (then raise
        ``fail_fast(message)`` at once); an exception of ``failures`` counts against
        the dependency, anything else (a result, an error answer) for it."""
        breaker = self._get(name)
        now = self._clock()
        old = breaker.state
        if not breaker.allow(now):
            raise fail_fast(
                f"{name} failed {breaker.failures} times in a row: failing fast for "
                f"{breaker.retry_after(now):.1f}s (circuit breaker open)"
            )
        self._changed(name, old, breaker.state)
        try:
            result = await work()
        except failures:
            old = breaker.state
            breaker.record_failure(self._clock())
            self._changed(name, old, breaker.state)
            raise
        except Exception:  # an error answer: the dependency is up (cancellation: no outcome)
            self._succeeded(name, breaker)
            raise
        self._succeeded(name, breaker)
        return result

    def _succeeded(self, name: str, breaker: CircuitBreaker) -> None:
        old = breaker.state
        breaker.record_success()
        self._changed(name, old, breaker.state)

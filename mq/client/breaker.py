"""Pure helpers of the client core: bootstrap parsing and the per-broker circuit breaker.

No I/O: the breaker is fed outcomes and the time by :class:`~mq.client.client.Client`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

Address = tuple[str, int]

DEFAULT_PORT: Final = 9292
"""The broker's default port (``mq serve`` with no ``--port``)."""
DEFAULT_BREAKER_THRESHOLD: Final = 5
"""Consecutive network failures that open a broker's circuit breaker."""
DEFAULT_BREAKER_COOLDOWN_S: Final = 2.0
"""How long an open breaker fails requests before it lets one trial through."""


def parse_bootstrap(bootstrap: str | Iterable[str]) -> list[Address]:
    """``"host:port[,host:port]"`` (or a list of ``host:port``) as addresses.

    A missing port means :data:`DEFAULT_PORT`; ``[::1]:9292`` is an IPv6 address.
    """
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out: list[Address] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_s = rest.removeprefix(":")
        elif item.count(":") == 1:
            host, port_s = item.split(":")
        else:
            host, port_s = item, ""
        try:
            port = int(port_s) if port_s else DEFAULT_PORT
        except ValueError:
            raise ValueError(f"bad port in bootstrap address {item!r}") from None
        if not host or not 0 < port < 65_536:
            raise ValueError(f"bad bootstrap address {item!r}")
        out.append((host, port))
    if not out:
        raise ValueError("bootstrap names no broker (expected 'host:port[,host:port]')")
    return out


class CircuitBreaker:
    """Closed → open after N consecutive failures → half-open after a cooldown.

    Pure: the caller passes the time. While open, :meth:`allow` says no until
    ``cooldown_s`` has passed; then it lets exactly one trial through
    (half-open) — a success closes the breaker, a failure reopens it. A trial
    whose outcome never comes back is forgotten after another cooldown.
    """

    CLOSED: Final = "closed"
    OPEN: Final = "open"
    HALF_OPEN: Final = "half-open"

    def __init__(
        self,
        failure_threshold: int = DEFAULT_BREAKER_THRESHOLD,
        cooldown_s: float = DEFAULT_BREAKER_COOLDOWN_S,
    ) -> None:
        if failure_threshold < 1 or cooldown_s < 0:
            raise ValueError("failure_threshold >= 1 and cooldown_s >= 0 are required")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.state: str = self.CLOSED
        self.failures = 0
        self._since = 0.0
        """When the breaker opened, or when the half-open trial started."""

    def allow(self, now: float) -> bool:
        """Whether a request may go to the broker now."""
        if self.state == self.CLOSED:
            return True
        if now - self._since < self.cooldown_s:
            return False
        self.state = self.HALF_OPEN
        self._since = now
        return True

    def retry_after(self, now: float) -> float:
        """Seconds until :meth:`allow` may say yes again (0 when it would now)."""
        if self.state == self.CLOSED:
            return 0.0
        return max(0.0, self._since + self.cooldown_s - now)

    def record_success(self) -> None:
        self.state = self.CLOSED
        self.failures = 0

    def record_failure(self, now: float) -> None:
        self.failures += 1
        if self.state == self.HALF_OPEN or self.failures >= self.failure_threshold:
            self.state = self.OPEN
            self._since = now

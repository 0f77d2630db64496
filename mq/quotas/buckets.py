"""Throttle buckets: a token bucket that may go into debt, and the throttle time it implies.

Kafka measures a client's rate in sampled windows and, when it is above its
quota, answers with ``throttle_time_ms``: how long the client must stay
quiet for its rate to come back to the quota. A token bucket computes the
same thing exactly and in O(1) per request:

* the bucket holds up to ``burst`` units (``rate * burst_s``: bytes, or
  seconds of the event loop for a request-time quota) and refills at
  ``rate`` units per second;
* every request *takes* what it used, even more than the bucket holds: the
  broker does not refuse work it has already done, the bucket goes into
  debt instead;
* the throttle time is the time the refill needs to pay the debt back,
  ``-tokens / rate``: a client that stays quiet that long finds the bucket
  at zero again, so over any interval it gets at most ``rate * interval +
  burst`` (plus the one request that made the debt).

This is the GCRA ("virtual scheduling") form of a leaky bucket meter, which
the unit tests use as the independent reference model.

Pure: the caller passes the time (seconds, any monotonic origin).
"""

from __future__ import annotations

from typing import Final

DEFAULT_BURST_S: Final = 1.0
"""A bucket's depth in seconds of its rate: a client idle for a second may send a
second's worth at once (Kafka's default quota window is one second)."""


class ThrottleBucket:
    """``rate`` units per second in bursts of ``rate * burst_s``; see the module docstring."""

    __slots__ = ("_at", "_capacity", "_tokens", "burst_s", "rate")

    def __init__(self, rate: float, now: float, burst_s: float = DEFAULT_BURST_S) -> None:
        if rate <= 0:
            raise ValueError(f"a bucket's rate must be positive, got {rate}")
        if burst_s <= 0:
            raise ValueError(f"a bucket's burst must be positive, got {burst_s}")
        self.rate = float(rate)
        self.burst_s = float(burst_s)
        self._capacity = self.rate * self.burst_s
        self._tokens = self._capacity
        self._at = now

    @property
    def capacity(self) -> float:
        return self._capacity

    def tokens(self, now: float) -> float:
        """The units available at ``now`` (negative: the debt still to pay back)."""
        self._refill(now)
        return self._tokens

    def record(self, amount: float, now: float) -> float:
        """``amount`` units were used at ``now``; the seconds the user must now wait."""
        if amount < 0:
            raise ValueError(f"a bucket records non-negative amounts, got {amount}")
        tokens = self._tokens
        elapsed = now - self._at
        if elapsed > 0:  # _refill, inline: this is once per request
            tokens = min(self._capacity, tokens + elapsed * self.rate)
            self._at = now
        tokens -= amount
        self._tokens = tokens
        return -tokens / self.rate if tokens < 0 else 0.0

    def throttle_s(self, now: float) -> float:
        """Seconds from ``now`` until the bucket is out of debt (0 when it is not in debt)."""
        self._refill(now)
        return -self._tokens / self.rate if self._tokens < 0 else 0.0

    def set_rate(self, rate: float, now: float, burst_s: float | None = None) -> None:
        """A new quota from ``now`` on: what was used stays used (the debt carries over,
        in units), the bucket is capped at the new depth."""
        if rate <= 0:
            raise ValueError(f"a bucket's rate must be positive, got {rate}")
        self._refill(now)
        self.rate = float(rate)
        if burst_s is not None:
            if burst_s <= 0:
                raise ValueError(f"a bucket's burst must be positive, got {burst_s}")
            self.burst_s = float(burst_s)
        self._capacity = self.rate * self.burst_s
        self._tokens = min(self._tokens, self._capacity)

    def _refill(self, now: float) -> None:
        elapsed = now - self._at
        if elapsed > 0:  # a clock that steps back refills nothing (and takes nothing)
            self._tokens = min(self._capacity, self._tokens + elapsed * self.rate)
            self._at = now

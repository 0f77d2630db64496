"""A token bucket: at most ``rate`` bytes per second, in bursts of up to one second's worth.

The leader serves followers that are catching up (outside the ISR) from one
of these, so that a replica copying a whole log after a long absence cannot
take the disks and network from producers, consumers and the in-sync
followers (a bulkhead; Kafka's replication throttle). In-sync followers are
never throttled: acks=all waits on them.

Pure bookkeeping; the caller passes the clock.
"""

from __future__ import annotations


class TokenBucket:
    def __init__(self, rate: float, now: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        self._tokens = rate
        self._at = now

    def available(self, now: float) -> int:
        """Bytes that may be sent now."""
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return max(0, int(self._tokens))

    def take(self, amount: int, now: float) -> None:
        """``amount`` bytes were sent (may overdraw: a whole batch goes even if larger)."""
        self.available(now)
        self._tokens -= amount

"""Per-queue receive rates (``queue.receive.max.per.sec``), as token buckets.

One bucket per share partition (share group x partition) whose topic sets a
rate: a receive gets at most the whole messages the bucket holds (it may
hold up to one second's worth), and what it got is taken from the bucket. A
receive that gets nothing because of the rate waits, within its long poll,
until the bucket has a message again (:meth:`ReceiveRates.wait_s`). The
in-flight cap (``queue.max.in.flight``) is the share partition's own bound
(:class:`~mq.queues.entries.ShareConfig.max_in_flight`).

Thread safety: one event loop.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from mq.errors import MQError
from mq.queues.config import receive_rate
from mq.quotas.buckets import ThrottleBucket


class ReceiveRates:
    def __init__(self) -> None:
        self._buckets: dict[Hashable, ThrottleBucket] = {}

    def allowance(self, key: Hashable, configs: Mapping[str, str], now: float) -> int | None:
        """Messages a receive may take now (None: no rate set)."""
        try:
            rate = receive_rate(configs)
        except MQError:  # checked when it was set; a bad value here means no limit
            rate = 0
        if not rate:
            self._buckets.pop(key, None)
            return None
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = ThrottleBucket(rate, now)
        elif bucket.rate != rate:
            bucket.set_rate(rate, now)
        return max(0, int(bucket.tokens(now)))

    def took(self, key: Hashable, count: int, now: float) -> None:
        bucket = self._buckets.get(key)
        if bucket is not None and count:
            bucket.record(count, now)

    def wait_s(self, key: Hashable, now: float) -> float | None:
        """Seconds until the bucket holds a whole message (None: no rate, or it does)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        tokens = bucket.tokens(now)
        if tokens >= 1:
            return None
        return (1 - tokens) / bucket.rate

    def forget(self, key: Hashable) -> None:
        self._buckets.pop(key, None)

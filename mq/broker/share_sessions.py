"""The share partitions a broker keeps loaded: least recently used first, counted per partition.

Every share group a client names in ``queue_receive`` becomes a loaded share
partition (:class:`mq.broker.queues.Session`) on the partition's leader. This table
is what bounds them (issue 18, F7): the :class:`~mq.broker.queues.ShareManager`
asks it how many are loaded on the broker and on one partition before loading
another, and which ones have been unused longest, to evict those whose state is
saved (they reload from ``__share_state`` on their next use).

Pure bookkeeping: no I/O, the clock is passed in (seconds, monotonic).

Thread safety: none; one event loop owns an instance.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

from mq.broker.share_store import ShareKey

V = TypeVar("V")

PRESSURE_MIN_IDLE_S = 1.0
"""A share partition used less than this long ago is not evicted to make room for
another, even if it looks idle: a receive holds its sessions between its
acquisitions without marking them (a long poll's wake-up, a multi-partition
receive still loading the others), and those gaps last milliseconds."""


class SessionLimits(NamedTuple):
    """The bounds of :class:`mq.broker.config.BrokerConfig` this table enforces."""

    per_broker: int
    per_partition: int
    idle_s: float


class SessionTable(Generic[V]):
    """Loaded values by share key, least recently used first, with a count per partition."""

    def __init__(self) -> None:
        self._items: OrderedDict[ShareKey, tuple[V, float]] = OrderedDict()
        self._per_partition: Counter[tuple[str, int]] = Counter()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: ShareKey) -> V | None:
        found = self._items.get(key)
        return None if found is None else found[0]

    def values(self) -> list[V]:
        """A copy, least recently used first."""
        return [value for value, _ in self._items.values()]

    def on_partition(self, topic: str, index: int) -> int:
        """How many share groups are loaded on this partition."""
        return self._per_partition[(topic, index)]

    def put(self, key: ShareKey, value: V, now: float) -> None:
        """Add (or replace) ``key``, as just used."""
        if key not in self._items:
            self._per_partition[(key.topic, key.partition)] += 1
        self._items[key] = (value, now)
        self._items.move_to_end(key)

    def touch(self, key: ShareKey, now: float) -> None:
        """``key`` was used now: it becomes the most recently used."""
        found = self._items.get(key)
        if found is not None:
            self._items[key] = (found[0], now)
            self._items.move_to_end(key)

    def remove(self, key: ShareKey) -> None:
        if self._items.pop(key, None) is not None:
            slot = (key.topic, key.partition)
            self._per_partition[slot] -= 1
            if self._per_partition[slot] <= 0:
                del self._per_partition[slot]

    def idle(self, now: float, idle_s: float) -> list[V]:
        """Values unused for at least ``idle_s``, least recently used first (stops at the
        first recent one: the cost is the number of idle values)."""
        found: list[V] = []
        for value, used in self._items.values():
            if now - used < idle_s:
                break
            found.append(value)
        return found

    def victim(
        self, now: float, evictable: Callable[[V], bool], partition: tuple[str, int] | None = None
    ) -> V | None:
        """The least recently used value that ``evictable`` accepts, unused for at least
        :data:`PRESSURE_MIN_IDLE_S` (on ``partition`` only, if given), or None."""
        for key, (value, used) in self._items.items():
            if now - used < PRESSURE_MIN_IDLE_S:
                return None
            if partition is not None and (key.topic, key.partition) != partition:
                continue
            if evictable(value):
                return value
        return None

"""Broker-wide admission: the memory budget of the connections and their counts.

Pure bookkeeping, no I/O (the connection layer, :mod:`mq.broker.connection`,
applies it to sockets):

- :class:`MemoryBudget` is one budget of bytes for everything the connections
  hold on clients' behalf: request bytes buffered (a partial frame is reserved
  whole as soon as its length prefix arrives, before it is buffered) and
  responses queued in the sockets' send buffers (Kafka's
  ``queued.max.request.bytes``, with the responses counted too). A reservation
  the budget cannot cover is refused; the connection stops reading and waits
  in line (FIFO) until enough is released.
- :class:`ConnectionCounts` bounds the connections in total and per client
  address (Kafka's ``max.connections`` and ``max.connections.per.ip``).
- :class:`RateLimitedLog` logs a recurring event once per interval with how
  many times it happened, instead of once per connection.

Not thread-safe: used from the event loop's thread only.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any, Protocol

SMALL_RESERVATION_BYTES = 1 << 20
"""A reservation up to this size (an ordinary request, read in more than one piece) is
taken at once if it fits, even while larger ones wait in line for room: clients of
ordinary requests keep being served while huge frames wait. A large waiter is delayed
only by frames this small, which complete (and give their bytes back) in milliseconds."""


class BudgetWaiter(Protocol):
    """A connection waiting for budget."""

    def budget_granted(self, size: int) -> None:
        """The ``size`` bytes it waited for are now reserved for it."""


class MemoryBudget:
    """Bytes that may be held for requests and responses across all connections.

    ``used`` may exceed ``limit`` by what was forced (:meth:`force`: bytes already
    in memory, a response written to a socket, the chunk a read just delivered);
    :meth:`try_take` refuses what does not fit, which is how *new* memory is
    kept from being spent. A refused reservation waits in line (:meth:`wait`);
    bytes freed go to the waiters in arrival order, each granted whole (a large
    frame is not starved by larger numbers of large ones behind it); only small
    reservations may pass the line, and only if they fit.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the memory budget must be >= 1 byte, got {limit}")
        self.limit = limit
        self.used = 0
        self._waiters: OrderedDict[int, tuple[BudgetWaiter, int]] = OrderedDict()

    @property
    def waiting(self) -> int:
        """How many reservations wait in line."""
        return len(self._waiters)

    def try_take(self, size: int) -> bool:
        """Reserve ``size`` bytes if they fit, and either no one waits in line or they are
        no more than :data:`SMALL_RESERVATION_BYTES`; False otherwise."""
        if size <= 0:
            return True
        if self.used + size > self.limit or (self._waiters and size > SMALL_RESERVATION_BYTES):
            return False
        self.used += size
        return True

    def force(self, delta: int) -> None:
        """Account for bytes already held (``delta`` < 0: they were freed)."""
        self.used += delta
        if delta < 0:
            self._grant()

    def release(self, size: int) -> None:
        """Give back ``size`` reserved bytes (the line may move)."""
        if size > 0:
            self.used -= size
            self._grant()

    def wait(self, waiter: BudgetWaiter, size: int) -> None:
        """Queue ``waiter`` for ``size`` bytes: ``waiter.budget_granted(size)`` is called
        once they are reserved for it (maybe at once)."""
        self._waiters[id(waiter)] = (waiter, size)
        self._grant()

    def cancel(self, waiter: BudgetWaiter) -> None:
        """Take ``waiter`` out of the line (its connection closed)."""
        if self._waiters.pop(id(waiter), None) is not None:
            self._grant()

    def _grant(self) -> None:
        while self._waiters:
            waiter, size = next(iter(self._waiters.values()))
            if self.used + size > self.limit:
                return
            self._waiters.popitem(last=False)
            self.used += size
            waiter.budget_granted(size)


class ConnectionCounts:
    """Open connections, in total and per client address."""

    def __init__(self, max_total: int, max_per_address: int) -> None:
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.total = 0
        self._per_address: defaultdict[str, int] = defaultdict(int)

    def admit(self, address: str) -> str | None:
        """Count a new connection from ``address``; or say why it is refused (not counted)."""
        if self.total >= self.max_total:
            return f"{self.total} connections are open, the bound (max_connections)"
        if self._per_address[address] >= self.max_per_address:
            return (
                f"{self._per_address[address]} connections from {address} are open, "
                f"the bound (max_connections_per_ip)"
            )
        self.total += 1
        self._per_address[address] += 1
        return None

    def release(self, address: str) -> None:
        """Uncount an admitted connection that closed."""
        self.total -= 1
        left = self._per_address[address] - 1
        if left > 0:
            self._per_address[address] = left
        else:
            del self._per_address[address]

    def from_address(self, address: str) -> int:
        return self._per_address.get(address, 0)


class RateLimitedLog:
    """One log line per ``interval_s`` for an event that may happen thousands of times."""

    def __init__(
        self,
        logger: logging.Logger,
        level: int,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._level = level
        self._interval = interval_s
        self._clock = clock
        self._next = 0.0
        self._suppressed = 0

    def __call__(self, message: str, *args: Any) -> None:
        now = self._clock()
        if now < self._next:
            self._suppressed += 1
            return
        if self._suppressed:
            message += " (and %d more like it since the last such line)"
            args = (*args, self._suppressed)
        self._logger.log(self._level, message, *args)
        self._next = now + self._interval
        self._suppressed = 0

"""What a connection needs to enforce quotas: loop-time accounting, request costs,
and the connection-creation rate per client address.

* :class:`Timed` runs a handler's coroutine and adds up the time each of its
  steps holds the event loop (the time between its awaits, not the time it
  waits): what a ``request_percentage`` quota is about (Kafka's request time
  quota, KIP-124, measures handler thread time; mq's one thread is the loop).
  Only requests of clients with such a quota pay for it.
* :class:`ClientQuotas` holds a connection's resolved buckets (looked up
  again only when the principal, the client id or the quotas change) and
  :meth:`Charges.charge` records one request's bytes and loop time against
  them and returns the throttle time (seconds), whether the request succeeded
  or failed: a failed request used the broker too, and a
  client sending only failing ones is throttled like any other (KIP-124
  counts every client request, unauthorized ones included, so a flood of
  refused requests is not free). :meth:`ClientQuotas.charge_refused` does it for a request
  refused before its handler (undecodable, or at the gate).
* :class:`ConnectionRate` keeps a bucket per client address for
  ``max_connection_creation_rate``.

Thread safety: one event loop.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Generator, Sequence
from typing import Any, Final

from mq.broker.quotas import QuotaManager, Resolved
from mq.quotas import entities as q
from mq.quotas.buckets import ThrottleBucket
from mq.wire import apis_data
from mq.wire.frames import Buffer

MAX_ADDRESSES: Final = 65_536
"""Client addresses whose connection-creation buckets are kept; past it those not in
debt are dropped (a dropped bucket comes back full: an address idle that long is)."""

_PRODUCE: Final = apis_data.PRODUCE.key
"""producer_byte_rate counts the produce request's bytes (as Kafka does)."""
_FETCH: Final = apis_data.FETCH.key
"""consumer_byte_rate counts the fetch response's bytes."""


class Timed:
    """``await Timed(coro)``: the coroutine's result; :attr:`spent` the seconds its
    steps held the loop (two clock reads per step, kept in locals until the end)."""

    __slots__ = ("_work", "spent")

    def __init__(self, work: Awaitable[Any]) -> None:
        self._work = work
        self.spent = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._work.__await__()
        send, clock = coro.send, time.perf_counter
        spent = 0.0
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                started = clock()
                try:
                    yielded = send(value) if error is None else coro.throw(error)
                except StopIteration as stop:
                    spent += clock() - started
                    return stop.value
                except BaseException:
                    spent += clock() - started
                    raise
                spent += clock() - started
                try:
                    value = yield yielded
                    error = None
                except BaseException as exc:  # cancellation goes into the handler
                    value, error = None, exc
        finally:
            self.spent += spent


def throttle_ms(wait_s: float) -> int:
    """A throttle time as a response carries it: milliseconds, rounded up (0: none)."""
    return int(wait_s * 1000 + 0.999) if wait_s > 0 else 0


class Charges:
    """The buckets of the quotas that apply to one client, and the cap on its waits:
    what one request's cost is recorded in (made once per resolution, kept by the
    connection and by each request in progress: a later lookup for another client
    id on the same connection does not move an earlier request's charge)."""

    __slots__ = ("fetch", "loop_time", "max_throttle_s", "produce")

    def __init__(self, resolved: Resolved, max_throttle_s: float) -> None:
        self.produce = resolved.get(q.PRODUCER_BYTE_RATE)
        self.fetch = resolved.get(q.CONSUMER_BYTE_RATE)
        self.loop_time = resolved.get(q.REQUEST_PERCENTAGE)
        """The buckets of its producer_byte_rate, consumer_byte_rate and
        request_percentage quotas (None: no such quota applies)."""
        self.max_throttle_s = max_throttle_s

    def charge(
        self,
        api_key: int,
        request_bytes: int,
        response: bytes | Sequence[Buffer],
        loop_s: float,
        now: float,
    ) -> float:
        """Record one request's cost: its bytes for a produce, its response's for a
        fetch, its loop time; the seconds the client must now wait (0: none), at most
        ``quota_max_throttle_ms``."""
        wait = 0.0
        if api_key == _PRODUCE:
            if self.produce is not None:
                wait = self.produce.record(request_bytes, now)
        elif api_key == _FETCH and self.fetch is not None:
            out = len(response) if isinstance(response, bytes) else sum(map(len, response))
            wait = self.fetch.record(out, now)
        if loop_s and self.loop_time is not None:
            loop_wait = self.loop_time.record(loop_s, now)
            if loop_wait > wait:
                wait = loop_wait
        return wait if wait < self.max_throttle_s else self.max_throttle_s


class ClientQuotas:
    """One connection's view of its client's quotas: the :class:`Charges` that apply,
    resolved once per (principal, client id) and quota generation, not per request.

    The request path asks :meth:`lookup` (three comparisons while nothing changed:
    no lookup in the manager's tables, no allocation); with no quota configured, or
    none that applies to the client, it is None and nothing else runs. Otherwise
    the handler is wrapped in :class:`Timed` only when a request_percentage quota
    applies, and :meth:`Charges.charge` records the request's cost in at most two
    buckets.
    """

    __slots__ = ("_charges", "_client_id", "_generation", "_principal", "_quotas")

    def __init__(self, quotas: QuotaManager) -> None:
        self._quotas = quotas
        self._generation = -1
        self._principal = ""
        self._client_id: str | None = None
        self._charges: Charges | None = None

    def lookup(self, principal: str, client_id: str | None, now: float) -> Charges | None:
        """The quotas that apply to this client (None: none)."""
        quotas = self._quotas
        if (
            self._generation == quotas.generation
            and client_id == self._client_id
            and principal == self._principal
        ):
            return self._charges
        resolved = quotas.resolved(principal, client_id, now) if quotas.active else None
        self._generation = quotas.generation  # after resolved(): it may prune buckets
        self._principal, self._client_id = principal, client_id
        self._charges = Charges(resolved, quotas.max_throttle_s) if resolved else None
        return self._charges

    def charge_refused(
        self,
        principal: str,
        client_id: str | None,
        api_key: int,
        request_bytes: int,
        loop_s: float,
        now: float,
    ) -> float:
        """Record the cost of a request refused before its handler ran (its bytes for a
        produce, the loop time its decoding and refusal took); the seconds its client
        must wait. Its response is a short error: nothing counts on the fetch byte rate."""
        charges = self.lookup(principal, client_id, now)
        if charges is None:
            return 0.0
        return charges.charge(api_key, request_bytes, b"", loop_s, now)


class ConnectionRate:
    """New connections per second per client address (0 = no limit)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._buckets: dict[str, ThrottleBucket] = {}

    def admit(self, address: str, now: float) -> float:
        """A connection from ``address`` was accepted at ``now``: the seconds it must wait
        before it is read (0: at once)."""
        if not self.rate:
            return 0.0
        bucket = self._buckets.get(address)
        if bucket is None:
            if len(self._buckets) >= MAX_ADDRESSES:
                self._buckets = {a: b for a, b in self._buckets.items() if b.throttle_s(now) > 0}
            bucket = self._buckets[address] = ThrottleBucket(self.rate, now)
        return bucket.record(1, now)

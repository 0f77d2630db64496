"""What a connection needs to enforce quotas: loop-time accounting, request costs,
and the connection-creation rate per client address.

* :class:`Timed` runs a handler's coroutine and adds up the time each of its
  steps holds the event loop (the time between its awaits, not the time it
  waits): what a ``request_percentage`` quota is about (Kafka's request time
  quota, KIP-124, measures handler thread time; mq's one thread is the loop).
  Only requests of clients with such a quota pay for it.
* :func:`charge` records one request's bytes and loop time against its
  client's buckets and returns the throttle time (seconds), whether the
  request succeeded or failed: a failed request used the broker too, and a
  client sending only failing ones is throttled like any other (KIP-124
  counts every client request, unauthorized ones included, so a flood of
  refused requests is not free). :func:`charge_refused` does it for a request
  refused before its handler (undecodable, or at the gate), whose client's
  quotas are not resolved yet.
* :class:`ConnectionRate` keeps a bucket per client address for
  ``max_connection_creation_rate``.

Thread safety: one event loop.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Generator
from typing import Any, Final

from mq.broker.quotas import QuotaManager, Resolved
from mq.quotas import entities as q
from mq.quotas.buckets import ThrottleBucket
from mq.wire import apis_data
from mq.wire.registry import Api

MAX_ADDRESSES: Final = 65_536
"""Client addresses whose connection-creation buckets are kept; past it those not in
debt are dropped (a dropped bucket comes back full: an address idle that long is)."""

_PRODUCE: Final = apis_data.PRODUCE.key
"""producer_byte_rate counts the produce request's bytes (as Kafka does)."""
_FETCH: Final = apis_data.FETCH.key
"""consumer_byte_rate counts the fetch response's bytes."""


class Timed:
    """``await Timed(coro)``: the coroutine's result; :attr:`spent` the seconds its
    steps held the loop."""

    __slots__ = ("_work", "spent")

    def __init__(self, work: Awaitable[Any]) -> None:
        self._work = work
        self.spent = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._work.__await__()
        clock = time.perf_counter
        value: Any = None
        error: BaseException | None = None
        while True:
            started = clock()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.spent += clock() - started
                return stop.value
            except BaseException:
                self.spent += clock() - started
                raise
            self.spent += clock() - started
            try:
                value = yield yielded
                error = None
            except BaseException as exc:  # cancellation goes into the handler
                value, error = None, exc


def needs_time(resolved: Resolved) -> bool:
    return q.REQUEST_PERCENTAGE in resolved


def throttle_ms(wait_s: float) -> int:
    """A throttle time as a response carries it: milliseconds, rounded up (0: none)."""
    return int(wait_s * 1000 + 0.999) if wait_s > 0 else 0


def charge(
    quotas: QuotaManager,
    resolved: Resolved,
    api: Api[Any, Any] | int,
    request_bytes: int,
    response_bytes: int,
    loop_s: float,
    now: float,
) -> float:
    """Record one request's cost for its client; the seconds it must wait (0: none).

    ``api``: the request's API, or its key (one no API has for an unknown key)."""
    throttle = 0.0
    key = api if isinstance(api, int) else api.key
    if key == _PRODUCE:
        throttle = quotas.charge(resolved, q.PRODUCER_BYTE_RATE, request_bytes, now)
    elif key == _FETCH:
        throttle = quotas.charge(resolved, q.CONSUMER_BYTE_RATE, response_bytes, now)
    if loop_s:
        loop_wait = quotas.charge(resolved, q.REQUEST_PERCENTAGE, loop_s, now)
        if loop_wait > throttle:
            throttle = loop_wait
    return throttle


def charge_refused(
    quotas: QuotaManager,
    principal: str,
    client_id: str | None,
    api_key: int,
    request_bytes: int,
    loop_s: float,
    now: float,
) -> float:
    """Record the cost of a request refused before its handler ran (its bytes for a
    produce, the loop time its decoding and refusal took); the seconds its client must
    wait. Its response is a short error: nothing counts on the fetch byte rate."""
    resolved = quotas.resolved(principal, client_id, now)
    if not resolved:
        return 0.0
    return charge(quotas, resolved, api_key, request_bytes, 0, loop_s, now)


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

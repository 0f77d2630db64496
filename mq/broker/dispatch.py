"""Fair dispatch across connections: deficit round robin over tenants, with bulkheads.

Connections with a complete request waiting (and nothing holding them back)
queue here, each under its tenant's *flow*: ``(principal, client id)``, as
Kafka keys quotas (the principal alone would put every anonymous client in
one flow until authentication exists). Once per turn of the event loop the
dispatcher starts requests of the queued connections, in
the order :class:`~mq.quotas.fair.FairScheduler` gives (at most
:data:`TURN_BUDGET`, or one per tenant with work): round robin over
flows, a flow's connections in turn, each request costing its size but at
least ``fair_quantum_bytes`` (so small requests alternate one for one, and a
1 MiB produce costs its flow 16 turns of a 64 KiB quantum). A connection
starts one request per turn (its frames stay in order); one that still has
requests queues again for the next turn.

Tasks run in the order they were made, so a tenant's next request now
waits behind at most one request of each other tenant with work, however
many connections or queued requests those have (before: behind one request
of every busy *connection*, in arrival order).

Bulkhead: a flow with ``max_inflight_per_principal`` requests in progress
over all its connections is blocked (skipped) until one finishes; other
flows are served meanwhile.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from mq.quotas.fair import FairScheduler

if TYPE_CHECKING:
    from mq.broker.config import BrokerConfig

TURN_BUDGET = 16
"""Requests started per turn of the loop (or one per tenant with work, if more): the
tasks a turn makes all run in the next turn, so this bounds how many requests a quiet
tenant's next one may wait behind, whatever the other tenants' connection counts
(24 busy connections of one tenant no longer put 24 requests ahead of it); at tens of
microseconds per request or more, a loop turn's own cost (~10 us) stays a few per cent."""

Flow = tuple[str, str]
"""(principal, client id)."""


class Dispatchable(Protocol):
    def dispatch_next(self) -> int:
        """Start the connection's next request; its size in bytes (0: none started)."""

    def after_turn(self) -> None:
        """Queue again if requests are still waiting and nothing holds the connection."""


class Dispatcher:
    """The broker's dispatch order (see the module docstring)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.quantum = config.fair_quantum_bytes
        self.max_inflight = config.max_inflight_per_principal
        self.fair: FairScheduler[Flow, Dispatchable] = FairScheduler(self.quantum)
        self._queued: dict[Dispatchable, Flow] = {}
        self.inflight: dict[Flow, int] = {}
        self._turn: asyncio.Handle | None = None

    def want(self, conn: Dispatchable, flow: Flow) -> None:
        """``conn`` has a request to start (it is queued once; a no-op if it is)."""
        if conn in self._queued:
            return
        self._queued[conn] = flow
        self.fair.push(flow, conn)
        if self._turn is None:
            self._turn = asyncio.get_running_loop().call_soon(self._run_turn)

    def forget(self, conn: Dispatchable) -> None:
        """``conn`` closed: out of the queue."""
        flow = self._queued.pop(conn, None)
        if flow is not None:
            self.fair.discard(flow, conn)

    def started(self, flow: Flow) -> None:
        count = self.inflight.get(flow, 0) + 1
        self.inflight[flow] = count
        if count >= self.max_inflight:
            self.fair.block(flow)

    def finished(self, flow: Flow) -> None:
        count = self.inflight.get(flow, 0) - 1
        if count <= 0:
            self.inflight.pop(flow, None)
        else:
            self.inflight[flow] = count
        if count < self.max_inflight:
            self.fair.unblock(flow)
            if self._turn is None and self.fair.flows:
                self._turn = asyncio.get_running_loop().call_soon(self._run_turn)

    def contended(self) -> bool:
        """Whether more than one flow has requests in progress: someone else to keep
        serving while one flow's big append is copied (:mod:`mq.storage.writer`)."""
        return len(self.inflight) > 1

    def _run_turn(self) -> None:
        self._turn = None
        served: list[Dispatchable] = []
        try:
            budget = min(len(self._queued), max(TURN_BUDGET, self.fair.flows))
            for _ in range(budget):
                got = self.fair.pop()
                if got is None:
                    break
                flow, conn = got
                del self._queued[conn]
                cost = 0
                try:
                    cost = conn.dispatch_next()
                finally:
                    self.fair.charge(flow, max(cost, self.quantum))
                served.append(conn)
        finally:
            for conn in served:
                conn.after_turn()
            if self._turn is None and self.fair.flows:  # blocked flows wait for finished()
                self._turn = asyncio.get_running_loop().call_soon(self._run_turn)

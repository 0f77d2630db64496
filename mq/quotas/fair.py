"""Fair sharing of the broker's dispatch between principals: deficit round robin.

Each *flow* (a principal) has a FIFO of ready *items* (its connections with a
request waiting); flows take turns in a round. A flow whose turn comes gets
``quantum`` of credit (request bytes) and is served, one item at a time,
while its credit is positive; what a served item cost is charged after the
fact (:meth:`FairScheduler.charge`: the size of a request is known only once
it is read), so a flow may overdraw by one request and carries that debt
into its next turn (surplus round robin, the post-charging form of deficit
round robin). A flow that empties keeps a debt but no credit, so idling
does not bank turns. Over any stretch where two flows both have work
waiting, what they are served differs by at most about one quantum plus
one request: a principal with 10,000 queued requests gets its share, and
another principal's next request waits for at most one turn of each other
flow, not for the backlog.

A flow can be *blocked* (its bulkhead of in-flight work is full): it keeps
its items but is skipped until unblocked.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

MAX_DEBTS = 100_000
"""Flows without items whose debt is remembered (a flow overdraws by at most one
request); past it those debts are forgiven, so flows that come and go (client ids
that change with every connection) cannot grow the scheduler without bound."""

F = TypeVar("F")
T = TypeVar("T")


class FairScheduler(Generic[F, T]):
    """Deficit (surplus) round robin over flows; see the module docstring."""

    def __init__(self, quantum: int) -> None:
        if quantum < 1:
            raise ValueError(f"quantum must be positive, got {quantum}")
        self.quantum = quantum
        self._queues: dict[F, deque[T]] = {}
        self._deficit: dict[F, int] = {}
        self._active: deque[F] = deque()
        """Flows with items, not blocked, in round order; the head is the one served."""
        self._granted = False
        """Whether the head flow has had its quantum for its current turn."""
        self._blocked: set[F] = set()
        self._serving: F | None = None
        """The flow of the last popped item, until it is charged."""

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @property
    def flows(self) -> int:
        """Flows with items that are not blocked."""
        return len(self._active)

    def deficit(self, flow: F) -> int:
        return self._deficit.get(flow, 0)

    def push(self, flow: F, item: T) -> None:
        """``item`` of ``flow`` is ready (behind the flow's other items)."""
        queue = self._queues.get(flow)
        if queue is None:
            queue = self._queues[flow] = deque()
            if flow not in self._blocked:
                self._active.append(flow)
        queue.append(item)

    def discard(self, flow: F, item: T) -> None:
        """Forget ``item`` (its connection closed)."""
        queue = self._queues.get(flow)
        if queue is None or item not in queue:
            return
        queue.remove(item)
        if not queue:
            self._drop(flow)

    def pop(self) -> tuple[F, T] | None:
        """The next item to serve, or None when no unblocked flow has one. Must be
        followed by :meth:`charge` before the next pop."""
        if self._serving is not None:
            raise RuntimeError("pop() again before charge()")
        active = self._active
        while active:
            flow = active[0]
            if not self._granted:
                self._deficit[flow] = self._deficit.get(flow, 0) + self.quantum
                self._granted = True
            if self._deficit[flow] > 0:
                queue = self._queues[flow]
                item = queue.popleft()
                self._serving = flow
                return flow, item
            active.rotate(-1)
            self._granted = False
        return None

    def charge(self, flow: F, cost: int) -> None:
        """What the item :meth:`pop` just returned for ``flow`` cost (>= 0)."""
        if self._serving != flow:
            raise RuntimeError("charge() for a flow that was not just served")
        self._serving = None
        self._deficit[flow] = self._deficit.get(flow, 0) - cost
        queue = self._queues[flow]
        if not queue:
            self._drop(flow)
        elif self._deficit[flow] <= 0 and self._active and self._active[0] == flow:
            self._active.rotate(-1)
            self._granted = False

    def block(self, flow: F) -> None:
        """Skip ``flow`` until :meth:`unblock` (it keeps its items and its debt)."""
        if flow in self._blocked:
            return
        self._blocked.add(flow)
        if flow in self._queues:
            self._leave_round(flow)

    def unblock(self, flow: F) -> None:
        if flow not in self._blocked:
            return
        self._blocked.discard(flow)
        if flow in self._queues:
            self._active.append(flow)

    def _leave_round(self, flow: F) -> None:
        if self._active and self._active[0] == flow:
            self._granted = False
        self._active.remove(flow)

    def _drop(self, flow: F) -> None:
        """``flow`` has no items left: out of the round; a debt is kept, credit is not."""
        del self._queues[flow]
        if flow not in self._blocked:
            self._leave_round(flow)
        if self._deficit.get(flow, 0) >= 0:
            self._deficit.pop(flow, None)
        elif len(self._deficit) > MAX_DEBTS:
            self._deficit = {f: d for f, d in self._deficit.items() if f in self._queues}

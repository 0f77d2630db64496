"""The fair scheduler (deficit/surplus round robin over principals) against a reference
model, and its fairness and ordering properties under any interleaving."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings, stateful
from hypothesis import strategies as st

from mq.quotas.fair import FairScheduler


class NaiveDrr:
    """Reference: the same policy written as explicit rounds over a list of flows."""

    def __init__(self, quantum: int) -> None:
        self.quantum = quantum
        self.queues: dict[str, deque[int]] = {}
        self.order: list[str] = []  # flows with items, in round order
        self.deficit: dict[str, int] = {}
        self.turn_started = False

    def push(self, flow: str, item: int) -> None:
        if flow not in self.queues:
            self.queues[flow] = deque()
            self.order.append(flow)
        self.queues[flow].append(item)

    def serve(self, cost_of: dict[int, int]) -> tuple[str, int] | None:
        while self.order:
            flow = self.order[0]
            if not self.turn_started:
                self.deficit[flow] = self.deficit.get(flow, 0) + self.quantum
                self.turn_started = True
            if self.deficit[flow] > 0:
                item = self.queues[flow].popleft()
                self.deficit[flow] -= cost_of[item]
                if not self.queues[flow]:
                    del self.queues[flow]
                    self.order.pop(0)
                    self.turn_started = False
                    self.deficit[flow] = min(0, self.deficit[flow])
                elif self.deficit[flow] <= 0:
                    self.order.append(self.order.pop(0))
                    self.turn_started = False
                return flow, item
            self.order.append(self.order.pop(0))
            self.turn_started = False
        return None


ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from("abcd"), st.integers(0, 5_000)),
        st.tuples(st.just("pop"), st.just(""), st.just(0)),
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(quantum=st.integers(1, 3_000), script=ops)
def test_the_scheduler_serves_in_the_reference_models_order(
    quantum: int, script: list[tuple[str, str, int]]
) -> None:
    fair: FairScheduler[str, int] = FairScheduler(quantum)
    model = NaiveDrr(quantum)
    cost_of: dict[int, int] = {}
    for n, (op, flow, cost) in enumerate(script):
        if op == "push":
            cost_of[n] = cost
            fair.push(flow, n)
            model.push(flow, n)
        else:
            got = fair.pop()
            if got is not None:
                fair.charge(got[0], cost_of[got[1]])
            assert got == model.serve(cost_of)
    while (got := fair.pop()) is not None:
        fair.charge(got[0], cost_of[got[1]])
        assert got == model.serve(cost_of)
    assert model.serve(cost_of) is None
    assert len(fair) == 0


@settings(max_examples=200, deadline=None)
@given(
    quantum=st.integers(100, 5_000),
    costs=st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 10_000), min_size=2),
)
def test_backlogged_principals_get_equal_shares_whatever_their_backlog(
    quantum: int, costs: dict[str, int]
) -> None:
    """Every flow has far more queued than is served; each flow's requests cost the
    same. Over the run, no two flows' served bytes differ by more than quantum plus
    the largest request."""
    fair: FairScheduler[str, int] = FairScheduler(quantum)
    for flow in costs:
        for i in range(3_000):  # more than all the pops: every flow stays backlogged
            fair.push(flow, i)
    served = dict.fromkeys(costs, 0)
    for _ in range(3_000):
        got = fair.pop()
        assert got is not None
        served[got[0]] += costs[got[0]]
        fair.charge(got[0], costs[got[0]])
    spread = max(served.values()) - min(served.values())
    assert spread <= quantum + max(costs.values())


def test_a_quiet_principal_waits_one_turn_not_for_the_backlog() -> None:
    fair: FairScheduler[str, int] = FairScheduler(quantum=1_000)
    for i in range(10_000):
        fair.push("noisy", i)
    for _ in range(7):  # the noisy one is mid-turn when the quiet one arrives
        got = fair.pop()
        assert got is not None
        fair.charge(got[0], 300)
    fair.push("quiet", 0)
    ahead = 0
    while (got := fair.pop()) != ("quiet", 0):
        assert got is not None
        assert got[0] == "noisy"
        fair.charge("noisy", 300)
        ahead += 300
    assert ahead <= 1_000 + 300  # at most one turn (a quantum and one request)


def test_each_flow_keeps_its_order_and_blocked_flows_are_skipped() -> None:
    fair: FairScheduler[str, int] = FairScheduler(quantum=10)
    for i in range(5):
        fair.push("a", i)
        fair.push("b", i)
    fair.block("a")
    served = []
    while (got := fair.pop()) is not None:
        served.append(got)
        fair.charge(got[0], 10)
    assert served == [("b", i) for i in range(5)]
    fair.unblock("a")
    while (got := fair.pop()) is not None:
        served.append(got)
        fair.charge(got[0], 10)
    assert served[5:] == [("a", i) for i in range(5)]


def test_discard_and_misuse() -> None:
    fair: FairScheduler[str, int] = FairScheduler(quantum=10)
    fair.push("a", 1)
    fair.discard("a", 1)
    fair.discard("a", 2)  # unknown: nothing
    assert fair.pop() is None
    fair.push("a", 1)
    fair.push("a", 2)
    flow, _ = fair.pop() or ("", 0)
    with pytest.raises(RuntimeError, match="before charge"):
        fair.pop()
    with pytest.raises(RuntimeError, match="not just served"):
        fair.charge("b", 1)
    fair.charge(flow, 1)
    with pytest.raises(ValueError, match="positive"):
        FairScheduler(0)


class SchedulerMachine(stateful.RuleBasedStateMachine):
    """Any interleaving of pushes, pops, blocks and discards: items come out once, in
    each flow's order, never from a blocked flow, and nothing is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.fair: FairScheduler[str, int] = FairScheduler(quantum=500)
        self.pending: dict[str, list[int]] = {}
        self.blocked: set[str] = set()
        self.next = 0

    @stateful.rule(flow=st.sampled_from("xyz"))
    def push(self, flow: str) -> None:
        self.fair.push(flow, self.next)
        self.pending.setdefault(flow, []).append(self.next)
        self.next += 1

    @stateful.rule(cost=st.integers(0, 2_000))
    def pop(self, cost: int) -> None:
        got = self.fair.pop()
        runnable = [f for f, items in self.pending.items() if items and f not in self.blocked]
        if got is None:
            assert not runnable
            return
        flow, item = got
        assert flow not in self.blocked
        assert self.pending[flow][0] == item
        self.pending[flow].pop(0)
        self.fair.charge(flow, cost)

    @stateful.rule(flow=st.sampled_from("xyz"))
    def block(self, flow: str) -> None:
        self.fair.block(flow)
        self.blocked.add(flow)

    @stateful.rule(flow=st.sampled_from("xyz"))
    def unblock(self, flow: str) -> None:
        self.fair.unblock(flow)
        self.blocked.discard(flow)

    @stateful.rule(flow=st.sampled_from("xyz"), data=st.data())
    def discard(self, flow: str, data: st.DataObject) -> None:
        items = self.pending.get(flow)
        if items:
            item = data.draw(st.sampled_from(items))
            self.fair.discard(flow, item)
            items.remove(item)

    @stateful.invariant()
    def sizes_agree(self) -> None:
        assert len(self.fair) == sum(len(v) for v in self.pending.values())


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


def test_debts_of_departed_flows_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mq.quotas.fair.MAX_DEBTS", 10)
    fair: FairScheduler[int, int] = FairScheduler(quantum=10)
    for flow in range(50):  # each overdraws once and leaves
        fair.push(flow, 0)
        got = fair.pop()
        assert got == (flow, 0)
        fair.charge(flow, 100)
        assert fair.deficit(flow) <= 0
    assert len(fair._deficit) <= 11

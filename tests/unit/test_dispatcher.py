"""The broker's fair dispatcher on a real event loop with stand-in connections: the
order requests start in across turns, per-connection order, and the bulkhead."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from mq.broker.config import BrokerConfig
from mq.broker.dispatch import TURN_BUDGET, Dispatcher, Flow


@dataclass(eq=False)
class FakeConnection:
    """Has ``requests`` to start, each of ``size`` bytes; logs every start."""

    dispatcher: Dispatcher
    flow: Flow
    name: str
    requests: int
    log: list[tuple[int, str, int]]
    turn: list[int]
    size: int = 100
    started: list[int] = field(default_factory=list)

    def dispatch_next(self) -> int:
        if not self.requests:
            return 0
        self.requests -= 1
        self.started.append(len(self.started))
        self.log.append((self.turn[0], self.name, len(self.started) - 1))
        self.dispatcher.started(self.flow)
        return self.size

    def after_turn(self) -> None:
        if self.requests:
            self.dispatcher.want(self, self.flow)


async def run_turns(turns: int, counter: list[int]) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)
        counter[0] += 1


async def test_a_quiet_tenant_starts_in_the_first_turn_ahead_of_a_busy_tenants_backlog() -> None:
    dispatcher = Dispatcher(BrokerConfig(max_inflight_per_principal=1_000_000))
    log: list[tuple[int, str, int]] = []
    turn = [0]
    noisy = [
        FakeConnection(dispatcher, ("User:ANONYMOUS", "noisy"), f"n{i}", 50, log, turn)
        for i in range(48)
    ]
    for conn in noisy:
        dispatcher.want(conn, conn.flow)
    quiet = FakeConnection(dispatcher, ("User:ANONYMOUS", "quiet"), "q", 3, log, turn)
    dispatcher.want(quiet, quiet.flow)
    await run_turns(20, turn)
    first_turn = [name for t, name, _ in log if t == 0]
    assert len(first_turn) == TURN_BUDGET  # not one per connection (48)
    assert first_turn.index("q") <= 1  # one noisy request at most ahead of it
    # its next requests also start one per turn, each near the front of its turn
    quiet_starts = [(t, i) for i, (t, name, _) in enumerate(log) if name == "q"]
    assert [t for t, _ in quiet_starts] == [0, 1, 2]
    # every connection's requests start in its order
    for conn in [*noisy, quiet]:
        assert [n for _, name, n in log if name == conn.name] == sorted(
            n for _, name, n in log if name == conn.name
        )


async def test_a_lone_tenant_keeps_the_whole_turn() -> None:
    dispatcher = Dispatcher(BrokerConfig())
    log: list[tuple[int, str, int]] = []
    turn = [0]
    conns = [
        FakeConnection(dispatcher, ("User:ANONYMOUS", "a"), f"a{i}", 5, log, turn) for i in range(4)
    ]
    for conn in conns:
        dispatcher.want(conn, conn.flow)
    await run_turns(10, turn)
    assert len(log) == 20
    assert [name for t, name, _ in log if t == 0] == ["a0", "a1", "a2", "a3"]  # one each


async def test_a_tenant_at_its_bulkhead_waits_and_others_are_served() -> None:
    dispatcher = Dispatcher(BrokerConfig(max_inflight_per_principal=3))
    log: list[tuple[int, str, int]] = []
    turn = [0]
    greedy = FakeConnection(dispatcher, ("User:ANONYMOUS", "greedy"), "g", 10, log, turn)
    polite = FakeConnection(dispatcher, ("User:ANONYMOUS", "polite"), "p", 5, log, turn)
    dispatcher.want(greedy, greedy.flow)
    dispatcher.want(polite, polite.flow)
    await run_turns(10, turn)
    assert sum(1 for _, name, _ in log if name == "g") == 3  # its in-flight bound
    assert sum(1 for _, name, _ in log if name == "p") == 3
    for _ in range(3):
        dispatcher.finished(greedy.flow)  # its requests complete: it is served again
    await run_turns(10, turn)
    assert sum(1 for _, name, _ in log if name == "g") == 6


def test_contended_while_more_than_one_flow_has_requests_in_progress() -> None:
    """What partitions ask before copying a big append in a thread (mq.storage.writer)."""
    dispatcher = Dispatcher(BrokerConfig())
    a, b = ("User:ANONYMOUS", "a"), ("User:ANONYMOUS", "b")
    assert not dispatcher.contended()
    dispatcher.started(a)
    dispatcher.started(a)
    assert not dispatcher.contended()  # one tenant alone, however many requests
    dispatcher.started(b)
    assert dispatcher.contended()
    dispatcher.finished(b)
    assert not dispatcher.contended()
    dispatcher.finished(a)
    dispatcher.finished(a)
    assert dispatcher.inflight == {}

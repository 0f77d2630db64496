"""``/readyz``'s reasons (:func:`mq.http.health.readiness`) for each way a broker can be
not ready, over a broker's state (its view, its replicas, its registration)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from mq.http.health import readiness
from mq.replication.placement import PartitionState


@dataclass
class Replica:
    is_leader: bool = True
    offline: Exception | None = None


@dataclass
class View:
    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)


@dataclass
class State:
    node_id: int = 1
    broker_epoch: int = 5
    view: View = field(default_factory=View)
    partitions: dict[tuple[str, int], Replica] = field(default_factory=dict)


def reasons(state: State) -> list[str]:
    return readiness(cast(Any, state))


def test_ready_when_registered_leading_and_in_sync() -> None:
    state = State()
    state.view.partitions[("a", 0)] = PartitionState((1, 2), 1, 0, (1, 2))
    state.view.partitions[("a", 1)] = PartitionState((2, 1), 2, 0, (2, 1))
    state.view.partitions[("b", 0)] = PartitionState((2, 3), 2, 0, (2, 3))  # not ours
    state.partitions[("a", 0)] = Replica(is_leader=True)
    state.partitions[("a", 1)] = Replica(is_leader=False)
    assert reasons(state) == []


def test_each_reason() -> None:
    state = State(broker_epoch=0)
    state.view.partitions[("a", 0)] = PartitionState((1, 2), 1, 0, (1, 2))
    state.view.partitions[("a", 1)] = PartitionState((1, 2), 1, 0, (1, 2))
    state.view.partitions[("a", 2)] = PartitionState((2, 1), 2, 0, (2,))
    state.view.partitions[("a", 3)] = PartitionState((1,), 1, 0, (1,))
    state.partitions[("a", 0)] = Replica(is_leader=False)
    state.partitions[("a", 1)] = Replica(offline=OSError("disk gone"))
    state.partitions[("a", 2)] = Replica(is_leader=False)
    assert reasons(state) == [
        "not registered in the cluster",
        "a-0: elected leader here but not leading yet",
        "a-1: log offline (disk gone)",
        "a-2: follower not caught up (out of the ISR)",
        "a-3: replica not open here",
    ]

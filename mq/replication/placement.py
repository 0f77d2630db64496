"""Where replicas go and who leads: the controller's pure decisions.

:func:`assign_replicas` places a new topic's replicas as Kafka does without
racks: partition ``p``'s first replica (its *preferred leader*) is broker
``(start + p) mod n``, and its followers follow at a shift that changes every
``n`` partitions, so leaders are spread evenly and the followers of one
broker's partitions do not all land on the same other broker.

:func:`elect_leader` picks a partition's leader after a change in the live
brokers: the first replica, in replica order, that is alive and in the ISR.
With unclean election allowed (per topic, off by default) a live replica
outside the ISR may lead when no ISR member is alive, at the price of the
messages only the lost replicas had. Every new leader gets a new epoch.

Pure functions: no I/O, no clock.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from mq.errors import InvalidReplicationFactorError

NO_LEADER = -1


class PartitionState(NamedTuple):
    """What the cluster agrees on about one partition (kept in the metadata store)."""

    replicas: tuple[int, ...]
    """Node ids; the first is the preferred leader."""
    leader: int
    """NO_LEADER (-1) when no eligible replica is alive: the partition is offline."""
    leader_epoch: int
    isr: tuple[int, ...]
    """In-sync replicas, the leader among them."""

    @classmethod
    def new(cls, replicas: Sequence[int]) -> PartitionState:
        """A new partition: led by its preferred leader at epoch 0, every replica in sync."""
        return cls(tuple(replicas), replicas[0], 0, tuple(replicas))


def assign_replicas(
    brokers: Iterable[int],
    partitions: int,
    replication_factor: int,
    *,
    start: int | None = None,
    rng: random.Random | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists of ``partitions`` new partitions over ``brokers``.

    ``start`` (the first partition's leader, as an index into the sorted
    brokers) is random unless given, so that topics do not all start on the
    same broker. Raises InvalidReplicationFactorError if there are fewer
    brokers than ``replication_factor``.
    """
    nodes = sorted(set(brokers))
    n = len(nodes)
    if replication_factor < 1 or replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} needs {replication_factor} live brokers, "
            f"there are {n}"
        )
    chooser = rng or random.Random()
    first = chooser.randrange(n) if start is None else start % n
    shift = chooser.randrange(n) if start is None else 0
    placed = []
    for p in range(partitions):
        if p and p % n == 0:
            shift += 1
        leader = (first + p) % n
        replicas = [nodes[leader]]
        for r in range(replication_factor - 1):
            # followers at 1 + (shift + r) mod (n - 1) after the leader: never the leader
            replicas.append(nodes[(leader + 1 + (shift + r) % (n - 1)) % n])
        placed.append(tuple(replicas))
    return placed


def elect_leader(
    state: PartitionState, live: Iterable[int], *, unclean: bool = False
) -> PartitionState:
    """The state after the live brokers changed: same state if the leader is alive.

    Otherwise the first live ISR member (in replica order) leads; with
    ``unclean``, the first live replica if no ISR member is alive. The ISR
    keeps only live members (never empty while a leader exists); with no
    eligible replica the partition goes offline (leader -1, ISR unchanged, so
    the last in-sync replicas stay known and win when they return).
    """
    alive = set(live)
    if state.leader in alive:
        return state
    isr_alive = [r for r in state.replicas if r in state.isr and r in alive]
    if isr_alive:
        leader = isr_alive[0]
        isr = tuple(r for r in state.isr if r in alive)
    elif unclean and (candidates := [r for r in state.replicas if r in alive]):
        leader = candidates[0]
        isr = (leader,)
    else:
        if state.leader == NO_LEADER:
            return state
        return state._replace(leader=NO_LEADER, leader_epoch=state.leader_epoch + 1)
    return PartitionState(state.replicas, leader, state.leader_epoch + 1, isr)


def preferred_leader_election(state: PartitionState, live: Iterable[int]) -> PartitionState:
    """Move leadership back to the preferred replica if it is alive and in sync."""
    preferred = state.replicas[0]
    if state.leader == preferred or preferred not in state.isr or preferred not in set(live):
        return state
    return state._replace(leader=preferred, leader_epoch=state.leader_epoch + 1)

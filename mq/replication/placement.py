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

Reassignment (Kafka's KIP-455): :func:`start_reassignment` widens a
partition's replicas to its target plus the replicas it is leaving, and
records which are being added and removed; the leader adds the new replicas to
the ISR as they catch up; :func:`finish_reassignment` then shrinks the
replicas to the target and moves leadership to the target's preferred leader;
:func:`cancel_reassignment` goes back to the original replicas.
:func:`rebalance_plan` computes the targets that spread replicas and preferred
leaders evenly over a set of brokers.

:func:`over_capacity` says when a new topic's replicas would take a broker past
the partitions it may host (its file budget, registered with it).

Pure functions: no I/O, no clock.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from mq.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError

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
    adding: tuple[int, ...] = ()
    """While a reassignment is in progress: the target's replicas that are new."""
    removing: tuple[int, ...] = ()
    """While a reassignment is in progress: the replicas the target leaves out."""

    @classmethod
    def new(cls, replicas: Sequence[int]) -> PartitionState:
        """A new partition: led by its preferred leader at epoch 0, every replica in sync."""
        return cls(tuple(replicas), replicas[0], 0, tuple(replicas))

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas once the reassignment in progress is done (the replicas if none is)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replicas before the reassignment in progress (the replicas if none is)."""
        return tuple(r for r in self.replicas if r not in self.adding)


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
    return state._replace(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr)


def preferred_leader_election(state: PartitionState, live: Iterable[int]) -> PartitionState:
    """Move leadership back to the preferred replica if it is alive and in sync."""
    preferred = state.replicas[0]
    if state.leader == preferred or preferred not in state.isr or preferred not in set(live):
        return state
    return state._replace(leader=preferred, leader_epoch=state.leader_epoch + 1)


# -- reassignment -----------------------------------------------------------------------


def start_reassignment(state: PartitionState, target: Sequence[int]) -> PartitionState:
    """The state once a reassignment of the partition to ``target`` starts.

    The replicas become the target followed by the current replicas it leaves
    out; ``adding`` and ``removing`` name the two differences; the leader
    stays. A target of the current replicas in another order takes effect at
    once (only the preferred leader changes). A new target while a
    reassignment is in progress replaces it: the original replicas are the
    current ones, and new replicas of the old target that the new one drops
    leave the ISR (handing leadership over if one of them led).

    Raises InvalidReplicaAssignmentError for an empty target, one that names
    a broker twice or a negative node id.
    """
    wanted = tuple(target)
    if not wanted:
        raise InvalidReplicaAssignmentError("a partition needs at least one replica")
    if len(set(wanted)) != len(wanted):
        raise InvalidReplicaAssignmentError(f"replicas {list(wanted)} name a broker twice")
    if min(wanted) < 0:
        raise InvalidReplicaAssignmentError(f"replicas {list(wanted)} name a negative node id")
    current = state.original
    if set(wanted) == set(current):
        return _with_replicas(state, wanted, (), ())
    replicas = wanted + tuple(r for r in current if r not in wanted)
    adding = tuple(r for r in wanted if r not in current)
    removing = tuple(r for r in current if r not in wanted)
    return _with_replicas(state, replicas, adding, removing)


def cancel_reassignment(state: PartitionState) -> PartitionState:
    """Back to the original replicas (the replicas less those being added), as Kafka does.

    Raises InvalidReplicaAssignmentError if no original replica is in sync
    (cancelling would leave the partition without an eligible leader).
    """
    if not state.reassigning:
        return state
    return _with_replicas(state, state.original, (), ())


def finish_reassignment(state: PartitionState) -> PartitionState | None:
    """The state that ends the reassignment in progress, or None while it cannot end yet.

    It can end once every replica being added is in the ISR and the partition
    has a leader: the replicas become the target, the ISR loses the replicas
    being removed, and leadership moves to the first in-sync replica of the
    target if the leader is being removed, or to the target's preferred
    leader (its first replica) if that one is in sync. Every change of leader
    gets a new epoch.
    """
    if not state.reassigning or state.leader == NO_LEADER:
        return None
    if any(r not in state.isr for r in state.adding):
        return None
    target = state.target
    in_sync = [r for r in target if r in state.isr]
    if not in_sync:
        return None  # only removals, and what stays has fallen behind: wait for it
    leader, epoch = state.leader, state.leader_epoch
    if (leader not in target or in_sync[0] == target[0]) and in_sync[0] != leader:
        leader, epoch = in_sync[0], epoch + 1
    isr = tuple(r for r in state.isr if r in target)
    return PartitionState(target, leader, epoch, isr)


def _with_replicas(
    state: PartitionState,
    replicas: tuple[int, ...],
    adding: tuple[int, ...],
    removing: tuple[int, ...],
) -> PartitionState:
    """``state`` with new replicas: the ISR keeps only replicas, and a leader that is no
    longer one hands over to the first in-sync replica (with a new epoch)."""
    isr = tuple(r for r in state.isr if r in replicas)
    if state.isr and not isr:
        raise InvalidReplicaAssignmentError(
            f"none of replicas {list(replicas)} is in sync (ISR {list(state.isr)})"
        )
    leader, epoch = state.leader, state.leader_epoch
    if leader != NO_LEADER and leader not in replicas:
        leader, epoch = next(r for r in replicas if r in isr), epoch + 1
    return PartitionState(replicas, leader, epoch, isr, adding, removing)


# -- rebalancing ------------------------------------------------------------------------

TopicPartitionKey = tuple[str, int]
"""(topic, partition index)."""


def rebalance_plan(
    states: Mapping[TopicPartitionKey, PartitionState], brokers: Iterable[int]
) -> dict[TopicPartitionKey, tuple[int, ...]]:
    """New replica lists that spread replicas and preferred leaders evenly over ``brokers``.

    Each partition keeps its replication factor. Replicas on brokers outside
    ``brokers`` move first; then, while some broker holds two replicas more
    than another, one replica moves from a most loaded broker to a least
    loaded one (in place in the list, so a preferred leader that moves stays
    preferred): as few moves as an even spread allows. Preferred leaders are
    then spread by reordering replicas only (no data moves): along shortest
    chains of partitions, from a broker that prefers two partitions more than
    another, until no such chain is left, which is an even spread (counts
    within one) whenever the replica lists allow one.

    A partition with a reassignment in progress counts with its target.
    Deterministic: the same input gives the same plan. Returns only the
    partitions whose replica list changes. Raises InvalidReplicationFactorError
    if a partition has more replicas than there are brokers.
    """
    nodes = sorted(set(brokers))
    lists = {key: list(states[key].target) for key in sorted(states)}
    for key, replicas in lists.items():
        if len(replicas) > len(nodes):
            raise InvalidReplicationFactorError(
                f"{key[0]}-{key[1]} has {len(replicas)} replicas, there are {len(nodes)} brokers"
            )
    _spread_replicas(lists, nodes)
    _spread_leaders(lists, nodes)
    return {
        key: tuple(replicas)
        for key, replicas in lists.items()
        if tuple(replicas) != states[key].target
    }


def _spread_replicas(lists: dict[TopicPartitionKey, list[int]], nodes: list[int]) -> None:
    members = set(nodes)
    load = dict.fromkeys(nodes, 0)
    hosted: dict[int, dict[TopicPartitionKey, None]] = {n: {} for n in nodes}
    """Per broker, the partitions with a replica on it (an ordered set)."""
    leaders = Counter(replicas[0] for replicas in lists.values() if replicas)
    stranded: list[tuple[TopicPartitionKey, int]] = []
    for key, replicas in lists.items():
        for r in replicas:
            if r in members:
                load[r] += 1
                hosted[r][key] = None
            else:
                stranded.append((key, r))

    def move(key: TopicPartitionKey, source: int, dest: int) -> None:
        replicas = lists[key]
        at = replicas.index(source)
        replicas[at] = dest
        if at == 0:
            leaders[source] -= 1
            leaders[dest] += 1
        if source in members:
            load[source] -= 1
            del hosted[source][key]
        load[dest] += 1
        hosted[dest][key] = None

    for key, source in stranded:
        dest = min(
            (n for n in nodes if n not in lists[key]), key=lambda n: (load[n], leaders[n], n)
        )
        move(key, source, dest)
    while nodes:
        high = min(nodes, key=lambda n: (-load[n], n))
        low = min(nodes, key=lambda n: (load[n], n))
        if load[high] - load[low] < 2:
            return
        # move a partition ``high`` prefers if it prefers more than ``low``, else a follower;
        # one can move: ``high`` hosts more partitions than ``low``, not all are on both
        shed_leader = leaders[high] > leaders[low]
        movable = (key for key in hosted[high] if low not in lists[key])
        first = next(movable)
        chosen = first
        if (lists[first][0] == high) != shed_leader:
            chosen = next((k for k in movable if (lists[k][0] == high) == shed_leader), first)
        move(chosen, high, low)


def _spread_leaders(lists: dict[TopicPartitionKey, list[int]], nodes: list[int]) -> None:
    count = dict.fromkeys(nodes, 0)
    led: dict[int, dict[TopicPartitionKey, None]] = {n: {} for n in nodes}
    for key, replicas in lists.items():
        count[replicas[0]] += 1
        led[replicas[0]][key] = None
    while True:
        path: list[tuple[TopicPartitionKey, int]] | None = None
        floor = min(count.values(), default=0)
        for source in sorted(nodes, key=lambda n: (-count[n], n)):
            if count[source] - floor < 2:
                break  # no broker can take a partition from this one or any after it
            path = _leader_path(source, count, led, lists)
            if path is not None:
                count[source] -= 1
                count[path[-1][1]] += 1
                holder = source
                for key, taker in path:
                    del led[holder][key]
                    led[taker][key] = None
                    holder = taker
                break
        if path is None:
            break
    for leader, keys in led.items():
        for key in keys:
            replicas = lists[key]
            if replicas[0] != leader:
                replicas.remove(leader)
                replicas.insert(0, leader)


def _leader_path(
    source: int,
    count: dict[int, int],
    led: dict[int, dict[TopicPartitionKey, None]],
    lists: dict[TopicPartitionKey, list[int]],
) -> list[tuple[TopicPartitionKey, int]] | None:
    """The shortest chain ``source`` -> partition it leads -> one of that partition's other
    replicas -> ... ending at a broker leading at least two fewer partitions than
    ``source``, as (partition, new leader) steps; None if there is none (breadth first)."""
    came_from: dict[int, tuple[int, TopicPartitionKey]] = {}
    queue = deque([source])
    while queue:
        holder = queue.popleft()
        for key in led[holder]:
            for taker in lists[key]:
                if taker == source or taker in came_from:
                    continue
                came_from[taker] = (holder, key)
                if count[taker] <= count[source] - 2:
                    steps = []
                    node = taker
                    while node != source:
                        previous, via = came_from[node]
                        steps.append((via, node))
                        node = previous
                    return steps[::-1]
                queue.append(taker)
    return None


def replica_counts(existing: Iterable[Sequence[int]]) -> Counter[int]:
    """How many replicas each broker hosts, from every partition's replica list (one
    pass: 10,000 partitions take milliseconds)."""
    return Counter(node for replicas in existing for node in replicas)


def over_capacity(
    limits: Mapping[int, int],
    hosted: Mapping[int, int],
    new: Sequence[Sequence[int]],
) -> str | None:
    """Why the replica lists ``new`` would take a broker past its limit, or None.

    ``limits`` is each broker's most hosted replicas (0: none known), ``hosted``
    what each hosts now (:func:`replica_counts`).
    """
    adding = Counter(node for replicas in new for node in replicas)
    capped = {node for node in adding if limits.get(node, 0) > 0}
    for node in sorted(capped):
        limit = limits[node]
        if hosted.get(node, 0) + adding[node] > limit:
            return (
                f"broker {node} hosts {hosted.get(node, 0)} partitions and may host {limit} "
                f"(max_partitions, from its file budget): {adding[node]} more are refused"
            )
    return None

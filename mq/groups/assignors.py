"""Partition assignment strategies: ``range``, ``roundrobin`` and ``sticky``.

Each strategy is a pure function with the :data:`Assignor` signature::

    assignor(members, partitions, previous) -> {member_id: {TopicPartition, ...}}

``members`` maps each member id to its :class:`Subscription`, ``partitions``
maps each existing topic to its partition count, and ``previous`` is the
assignment the group had before (only ``sticky`` reads it). The result has a
key for every member (possibly an empty set), and every partition of a topic
that at least one member subscribes to is assigned to exactly one member that
subscribes to it. Topics nobody subscribes to, and subscribed topics that do
not exist, are ignored.

The strategies follow Kafka's, so their behaviour is the one users expect:

- ``range``: per topic, the subscribed members in order each get one
  contiguous range of partitions; the first ``count % members`` get one extra.
- ``roundrobin``: every (topic, partition) in sorted order is dealt to the
  members in order, skipping members that do not subscribe to its topic.
- ``sticky``: as balanced as the subscriptions allow while moving as few
  partitions as possible away from their ``previous`` owner.

Determinism: the output depends only on the input's values, never on dict or
set iteration order, because every coordinator restart or failover must
compute the same target from the same group. Members are ordered by
:func:`member_order`: static members (with a ``group_instance_id``) first, by
instance id, then the others by member id. A static member that restarts gets
a new member id but keeps its instance id, hence its place in the order and
its partitions.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from types import MappingProxyType
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic; sorts by topic, then partition."""

    topic: str
    partition: int


@dataclass(frozen=True)
class Subscription:
    """What one member asked for when it joined."""

    topics: frozenset[str]
    group_instance_id: str | None = None
    """Static membership: a stable id per consumer process, kept across restarts."""


Assignment = dict[str, set[TopicPartition]]
Assignor = Callable[
    [Mapping[str, Subscription], Mapping[str, int], Mapping[str, Collection[TopicPartition]]],
    Assignment,
]


def member_order(members: Mapping[str, Subscription]) -> list[str]:
    """Member ids in assignment order: static members by instance id, then the rest by id."""

    def key(member_id: str) -> tuple[int, str, str]:
        instance_id = members[member_id].group_instance_id
        if instance_id is not None:
            return (0, instance_id, member_id)
        return (1, member_id, "")

    return sorted(members, key=key)


def subscribers(
    members: Mapping[str, Subscription], partitions: Mapping[str, int]
) -> dict[str, list[str]]:
    """Existing topics with at least one partition and one subscriber -> subscribers in order.

    The topics are sorted; each list follows :func:`member_order`. Members
    with the same subscription (usually all of them) are grouped first, so a
    thousand members of a hundred topics each cost a hundred list copies,
    not a hundred thousand appends.
    """
    order = member_order(members)
    alike: dict[frozenset[str], list[str]] = {}
    for member_id in order:
        alike.setdefault(members[member_id].topics, []).append(member_id)
    lists: dict[str, list[list[str]]] = {}
    for topics, member_ids in alike.items():
        for topic in topics:
            if partitions.get(topic, 0) > 0:
                lists.setdefault(topic, []).append(member_ids)
    rank = {member_id: i for i, member_id in enumerate(order)}.__getitem__
    return {
        topic: list(lists[topic][0])
        if len(lists[topic]) == 1
        else sorted(chain.from_iterable(lists[topic]), key=rank)
        for topic in sorted(lists)
    }


def range_assignor(
    members: Mapping[str, Subscription],
    partitions: Mapping[str, int],
    previous: Mapping[str, Collection[TopicPartition]],
) -> Assignment:
    """Per topic, contiguous ranges in member order; ``previous`` is not used."""
    result: Assignment = {member_id: set() for member_id in members}
    for topic, subs in subscribers(members, partitions).items():
        per_member, extra = divmod(partitions[topic], len(subs))
        start = 0
        for i, member_id in enumerate(subs):
            length = per_member + (1 if i < extra else 0)
            if length:  # with more members than partitions, most get none of this topic
                result[member_id].update(
                    TopicPartition(topic, p) for p in range(start, start + length)
                )
                start += length
    return result


def roundrobin_assignor(
    members: Mapping[str, Subscription],
    partitions: Mapping[str, int],
    previous: Mapping[str, Collection[TopicPartition]],
) -> Assignment:
    """Every partition in sorted order to the next subscribed member; ``previous`` is unused."""
    result: Assignment = {member_id: set() for member_id in members}
    order = member_order(members)
    turn = 0
    for topic in sorted(subscribers(members, partitions)):
        for partition in range(partitions[topic]):
            while topic not in members[order[turn % len(order)]].topics:
                turn += 1  # ends: the topic has a subscriber, so a full turn finds it
            result[order[turn % len(order)]].add(TopicPartition(topic, partition))
            turn += 1
    return result


def sticky_assignor(
    members: Mapping[str, Subscription],
    partitions: Mapping[str, int],
    previous: Mapping[str, Collection[TopicPartition]],
) -> Assignment:
    """Keep what can be kept, deal the rest to the least loaded, then even out.

    1. Keep: each member keeps the partitions of ``previous`` that still exist
       and that it still subscribes to (a partition claimed by two members
       goes to the first in :func:`member_order`).
    2. Fill: every other partition goes to its least-loaded subscriber
       (partitions of topics with the fewest subscribers first, since they
       have the fewest choices).
    3. Balance: while the most-loaded member holds a partition whose topic a
       member with at least two fewer partitions subscribes to, move it there.

    Step 3 takes from the most-loaded member that can give and gives to the
    least-loaded subscriber, so when every member subscribes to the same topics
    the counts end within one of each other after the fewest possible moves,
    and a fill never has to be undone (a member that received in step 2 is
    never the one step 3 takes from). With different subscriptions the result
    has no partition that could move to a subscriber with two fewer.

    Cost: linear in the partitions and the (member, topic) subscriptions, plus
    a heap operation (O(log members)) per partition dealt in step 2 or moved in
    step 3, so a join or leave in a group of a thousand members and ten
    thousand partitions takes about ten milliseconds of the coordinator's event
    loop (``tests/unit/test_group_assignors.py`` holds it to balanced and sticky
    at that size).
    """
    order = member_order(members)
    loads = _Loads(order, subscribers(members, partitions))
    claimed = loads.keep(members, partitions, previous)
    for topic in sorted(claimed, key=lambda topic: (len(loads.subscribers[topic]), topic)):
        taken = claimed[topic]
        for partition in range(partitions[topic]):
            if partition not in taken:
                loads.deal(TopicPartition(topic, partition))
    loads.balance()
    return {member_id: loads.assignment(member_id) for member_id in order}


class _Loads:
    """Who holds what during :func:`sticky_assignor`, with the least-loaded
    subscriber of each topic at hand, so a group of thousands of members and
    partitions is assigned in O(moves x log) rather than O(moves x members).

    Topics with the same subscribers share a *pool*: one lazy min-heap of
    (count, rank, member) where an entry is current when its count is the
    member's count. With equal subscriptions there is a single pool, however
    many topics.
    """

    def __init__(self, order: list[str], subscribers: dict[str, list[str]]) -> None:
        self.subscribers = subscribers
        self.rank = {member_id: i for i, member_id in enumerate(order)}
        self.count = dict.fromkeys(order, 0)
        self.held: dict[str, dict[str, list[TopicPartition]]] = {m: {} for m in order}
        """Each member's partitions by topic, sorted (they are the callers' objects when kept)."""
        # Pools are numbered: a tuple of thousands of member ids is slow to hash.
        pool_ids: dict[tuple[str, ...], int] = {}
        self.pool_of: dict[str, int] = {}
        self.pools_of: dict[str, list[int]] = {member_id: [] for member_id in order}
        self.pools: list[tuple[str, ...]] = []
        for topic, subs in subscribers.items():
            pool = tuple(subs)
            pool_id = pool_ids.setdefault(pool, len(self.pools))
            if pool_id == len(self.pools):
                self.pools.append(pool)
                for member_id in pool:
                    self.pools_of[member_id].append(pool_id)
            self.pool_of[topic] = pool_id
        self.heaps: list[list[tuple[int, int, str]]] = []
        self.everyone: list[tuple[int, int, str]] | None = None
        """Every member by count, kept only during :meth:`balance` (for its stop test)."""

    def keep(
        self,
        members: Mapping[str, Subscription],
        partitions: Mapping[str, int],
        previous: Mapping[str, Collection[TopicPartition]],
    ) -> dict[str, set[int]]:
        """Step 1 of :func:`sticky_assignor`; returns the partitions kept, by topic.

        Members are visited in rank order, so a partition claimed twice goes
        to the first; the order within a member's ``previous`` does not matter.
        The heaps are built once, at the end, rather than as each partition is kept.
        """
        claimed: dict[str, set[int]] = {topic: set() for topic in self.subscribers}
        for member_id in self.rank:
            topics = members[member_id].topics
            held = self.held[member_id]
            for tp in previous.get(member_id, ()):
                topic, partition = tp
                taken = claimed.get(topic)
                if (
                    taken is not None
                    and partition not in taken
                    and topic in topics
                    and 0 <= partition < partitions[topic]
                ):
                    taken.add(partition)
                    held.setdefault(topic, []).append(tp)
            for tps in held.values():
                tps.sort()
            self.count[member_id] = sum(map(len, held.values()))
        for pool in self.pools:
            heap = [(self.count[m], self.rank[m], m) for m in pool]
            heapq.heapify(heap)
            self.heaps.append(heap)
        return claimed

    def deal(self, tp: TopicPartition) -> None:
        """Give ``tp`` to the least-loaded subscriber of its topic (step 2)."""
        pool = self.pool_of[tp.topic]
        heap = self.heaps[pool]
        member_id = self._top(heap)
        insort(self.held[member_id].setdefault(tp.topic, []), tp)
        count = self.count[member_id] = self.count[member_id] + 1
        entry = (count, self.rank[member_id], member_id)
        heapq.heapreplace(heap, entry)  # the top was the member's current entry
        for other in self.pools_of[member_id]:
            if other != pool:
                heapq.heappush(self.heaps[other], entry)

    def give(self, member_id: str, tp: TopicPartition) -> None:
        insort(self.held[member_id].setdefault(tp.topic, []), tp)
        self._recount(member_id, +1)

    def take(self, member_id: str, topic: str) -> TopicPartition:
        """Remove and return the member's highest partition of ``topic``."""
        held = self.held[member_id][topic]
        tp = held.pop()
        if not held:
            del self.held[member_id][topic]
        self._recount(member_id, -1)
        return tp

    def least(self, topic: str) -> str:
        """The subscriber of ``topic`` with the fewest partitions (the first in order on ties)."""
        return self._top(self.heaps[self.pool_of[topic]])

    def _top(self, heap: list[tuple[int, int, str]]) -> str:
        while heap[0][0] != self.count[heap[0][2]]:
            heapq.heappop(heap)
        return heap[0][2]

    def balance(self) -> None:
        """Move partitions from the most to the least loaded until no move helps.

        A move from ``a`` to ``b`` needs ``count[a] - count[b] >= 2``; it
        lowers the sum of squared counts, so the loop ends. Members are taken
        most-loaded first; one that cannot give now may be able to after
        others gave, hence the repeat until a round moves nothing. A round
        stops early once the giver has fewer than two more than the least
        loaded member of all: no one after it can give either.
        """
        everyone = [(c, self.rank[m], m) for m, c in self.count.items()]
        heapq.heapify(everyone)
        self.everyone = everyone
        moved = True
        while moved:
            moved = False
            queue = [(-c, self.rank[m], m) for m, c in self.count.items()]
            heapq.heapify(queue)
            while queue:
                negative_count, _, giver = heapq.heappop(queue)
                if -negative_count != self.count[giver]:
                    continue
                if -negative_count - self.count[self._top(everyone)] < 2:
                    break
                target = self._receiver(giver)
                if target is None:
                    continue
                receiver, topic = target
                self.give(receiver, self.take(giver, topic))
                moved = True
                for member_id in (giver, receiver):
                    heapq.heappush(queue, (-self.count[member_id], self.rank[member_id], member_id))
        self.everyone = None

    def _receiver(self, giver: str) -> tuple[str, str] | None:
        """The least-loaded member (and topic) that ``giver`` should hand a partition to."""
        best: tuple[str, str] | None = None
        seen: set[int] = set()
        for topic in sorted(self.held[giver]):
            pool = self.pool_of[topic]
            if pool in seen:  # the same candidate as a topic before: not better
                continue
            seen.add(pool)
            candidate = self._top(self.heaps[pool])
            if self.count[giver] - self.count[candidate] < 2:
                continue
            if best is None or self._key(candidate) < self._key(best[0]):
                best = (candidate, topic)
        return best

    def _key(self, member_id: str) -> tuple[int, int]:
        return (self.count[member_id], self.rank[member_id])

    def _recount(self, member_id: str, delta: int) -> None:
        self.count[member_id] += delta
        entry = (self.count[member_id], self.rank[member_id], member_id)
        for pool in self.pools_of[member_id]:
            heapq.heappush(self.heaps[pool], entry)
        if self.everyone is not None:
            heapq.heappush(self.everyone, entry)

    def assignment(self, member_id: str) -> set[TopicPartition]:
        return set().union(*self.held[member_id].values())


ASSIGNORS: Mapping[str, Assignor] = MappingProxyType(
    {"range": range_assignor, "roundrobin": roundrobin_assignor, "sticky": sticky_assignor}
)
"""The assignors by the name a member asks for in ``join_group``."""


def to_wire(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """``{topic: [partition, ...]}`` sorted, the shape of heartbeat ``assignment``/``revoke``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(tps):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def from_wire(assignment: Mapping[str, Iterable[int]]) -> set[TopicPartition]:
    """The partitions of a heartbeat's ``owned`` map."""
    return {TopicPartition(topic, p) for topic, parts in assignment.items() for p in parts}

"""Strategies and helpers shared by the consumer-group assignment tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st

from mq.groups.assignors import (
    ASSIGNORS,
    Assignment,
    Subscription,
    TopicPartition,
)

TP = TopicPartition
TOPICS = ["a", "b", "c", "d"]
MISSING_TOPIC = "zz"  # subscribed to by some members, never created
FAST = settings(max_examples=100, deadline=None)

Members = dict[str, Subscription]
Counts = dict[str, int]
Previous = dict[str, list[TopicPartition]]

# -- strategies ---------------------------------------------------------------------------------

member_ids = st.text("mnop0123", min_size=1, max_size=4)
counts = st.fixed_dictionaries({t: st.integers(0, 9) for t in TOPICS})
subscriptions = st.frozensets(st.sampled_from([*TOPICS, MISSING_TOPIC]), min_size=1)


@st.composite
def groups(draw: st.DrawFn, *, same_subscription: bool = False) -> tuple[Members, Counts]:
    """Members (1-8, some static) with their subscriptions, and partition counts."""
    ids = draw(st.lists(member_ids, min_size=1, max_size=8, unique=True))
    shared = draw(subscriptions)
    instance_ids = iter(draw(st.permutations([f"i{n}" for n in range(len(ids))])))
    members = {}
    for member_id in ids:
        topics = shared if same_subscription else draw(subscriptions)
        static = draw(st.booleans())
        members[member_id] = Subscription(topics, next(instance_ids) if static else None)
    return members, draw(counts)


def previous_of(members: Members, counts: Counts) -> st.SearchStrategy[Previous]:
    """Any previous assignment: stale partitions, unsubscribed topics, double claims."""
    every = [TP(t, p) for t in [*TOPICS, MISSING_TOPIC] for p in range(counts.get(t, 0) + 2)]
    claims = st.lists(st.tuples(st.sampled_from(sorted(members)), st.sampled_from(every)))

    def grouped(pairs: list[tuple[str, TP]]) -> Previous:
        previous: Previous = {m: [] for m in members}
        for member_id, tp in pairs:
            previous[member_id].append(tp)
        return previous

    return claims.map(grouped)


@st.composite
def disjoint_previous(draw: st.DrawFn, members: Members, counts: Counts) -> Previous:
    """A previous assignment where each existing partition had at most one owner."""
    previous: Previous = {m: [] for m in members}
    for topic, count in counts.items():
        for p in range(count):
            owner = draw(st.sampled_from([None, *members]))
            if owner is not None:
                previous[owner].append(TP(topic, p))
    return previous


# -- helpers ------------------------------------------------------------------------------------


def assignable(members: Mapping[str, Subscription], counts: Mapping[str, int]) -> set[TP]:
    """Every partition of a topic that exists and has a subscriber."""
    wanted = set().union(*(s.topics for s in members.values()))
    return {TP(t, p) for t, n in counts.items() if t in wanted for p in range(n)}


def check_complete(members: Members, counts: Counts, result: Assignment) -> None:
    assert set(result) == set(members)
    every = [tp for tps in result.values() for tp in tps]
    assert len(every) == len(set(every)), "a partition is assigned twice"
    assert set(every) == assignable(members, counts)
    for member_id, tps in result.items():
        assert {tp.topic for tp in tps} <= members[member_id].topics


def sizes(result: Assignment) -> list[int]:
    return [len(tps) for tps in result.values()]


def fewest_moves(kept: Iterable[int], assignable_count: int, member_count: int) -> int:
    """How many partitions a balanced assignment must take from their previous owners.

    ``kept`` is how many each member could keep (equal subscriptions). With
    ``q, r = divmod(assignable_count, member_count)``, the best a balanced
    result can do is let the r members that kept most keep q + 1, the others q.
    """
    q, r = divmod(assignable_count, member_count)
    most_first = sorted(kept, reverse=True)
    can_keep = sum(min(c, q + 1 if i < r else q) for i, c in enumerate(most_first))
    return sum(most_first) - can_keep


def was_valid(tp: TP, subscription: Subscription, counts: Counts) -> bool:
    return tp.topic in subscription.topics and tp.partition < counts.get(tp.topic, 0)


V = TypeVar("V")


def renamed(mapping: Mapping[str, V], old: str, new: str) -> dict[str, V]:
    return {new if k == old else k: v for k, v in mapping.items()}


ALL = pytest.mark.parametrize("assignor", ASSIGNORS.values(), ids=ASSIGNORS.keys())

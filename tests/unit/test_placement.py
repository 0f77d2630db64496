"""Replica placement and leader election: the controller's pure decisions."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError
from mq.replication.placement import (
    NO_LEADER,
    PartitionState,
    assign_replicas,
    cancel_reassignment,
    elect_leader,
    finish_reassignment,
    preferred_leader_election,
    rebalance_plan,
    start_reassignment,
)


@given(
    brokers=st.sets(st.integers(0, 1000), min_size=1, max_size=12),
    partitions=st.integers(1, 200),
    data=st.data(),
)
def test_placement_is_valid_and_balanced(
    brokers: set[int], partitions: int, data: st.DataObject
) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    placed = assign_replicas(brokers, partitions, rf, rng=random.Random(data.draw(st.integers())))
    assert len(placed) == partitions
    for replicas in placed:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= brokers
    leaders = Counter(replicas[0] for replicas in placed)
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1  # leaders spread evenly
    if partitions % len(brokers) == 0:
        every = Counter(r for replicas in placed for r in replicas)
        assert {every[b] for b in brokers} == {rf * partitions // len(brokers)}


def test_followers_of_one_brokers_partitions_spread_over_the_others() -> None:
    placed = assign_replicas([1, 2, 3, 4], 16, 2, start=0)
    followers_of_1 = {replicas[1] for replicas in placed if replicas[0] == 1}
    assert followers_of_1 == {2, 3, 4}


def test_too_few_brokers_for_the_replication_factor() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="needs 3 live brokers, there are 2"):
        assign_replicas([1, 2], 3, 3)


STATE = PartitionState((1, 2, 3), leader=1, leader_epoch=4, isr=(1, 2, 3))


def test_a_live_leader_stays() -> None:
    assert elect_leader(STATE, {1, 2}) is STATE


def test_the_first_live_in_sync_replica_takes_over_with_a_new_epoch() -> None:
    assert elect_leader(STATE, {2, 3}) == PartitionState((1, 2, 3), 2, 5, (2, 3))
    lagging = STATE._replace(isr=(1, 3))
    assert elect_leader(lagging, {2, 3}) == PartitionState((1, 2, 3), 3, 5, (3,))


def test_no_live_in_sync_replica_takes_the_partition_offline_until_one_returns() -> None:
    lagging = STATE._replace(isr=(1,))
    offline = elect_leader(lagging, {2, 3})
    assert offline == PartitionState((1, 2, 3), NO_LEADER, 5, (1,))
    assert elect_leader(offline, {2, 3}) is offline  # no epoch churn while offline
    assert elect_leader(offline, {1, 2, 3}) == PartitionState((1, 2, 3), 1, 6, (1,))


def test_unclean_election_takes_a_live_replica_outside_the_isr() -> None:
    lagging = STATE._replace(isr=(1,))
    assert elect_leader(lagging, {3, 2}, unclean=True) == PartitionState((1, 2, 3), 2, 5, (2,))
    assert elect_leader(lagging, set(), unclean=True).leader == NO_LEADER


def test_preferred_leader_election() -> None:
    moved = PartitionState((1, 2, 3), 2, 5, (1, 2, 3))
    assert preferred_leader_election(moved, {1, 2, 3}) == PartitionState((1, 2, 3), 1, 6, (1, 2, 3))
    assert preferred_leader_election(moved._replace(isr=(2, 3)), {1, 2, 3}).leader == 2
    assert preferred_leader_election(moved, {2, 3}).leader == 2


def test_an_election_keeps_the_reassignment_in_progress() -> None:
    moving = start_reassignment(STATE, (4, 2, 3))._replace(isr=(1, 2, 3, 4))
    elected = elect_leader(moving, {2, 3, 4})
    assert (elected.leader, elected.adding, elected.removing) == (4, (4,), (1,))


# -- reassignment ------------------------------------------------------------------------


def test_a_reassignment_widens_the_replicas_then_shrinks_them_to_the_target() -> None:
    moving = start_reassignment(STATE, (4, 2, 5))
    assert moving == PartitionState((4, 2, 5, 1, 3), 1, 4, (1, 2, 3), (4, 5), (1, 3))
    assert (moving.target, moving.original) == ((4, 2, 5), (2, 1, 3))
    assert finish_reassignment(moving) is None  # 4 and 5 are not in sync yet
    assert finish_reassignment(moving._replace(isr=(1, 2, 3, 4))) is None
    done = finish_reassignment(moving._replace(isr=(1, 2, 3, 5, 4)))
    # the new preferred leader is in sync: it leads, with a new epoch
    assert done == PartitionState((4, 2, 5), 4, 5, (2, 5, 4))


def test_a_removed_leader_hands_over_to_the_first_in_sync_target_replica() -> None:
    moving = start_reassignment(STATE, (4, 3))._replace(isr=(1, 2, 3, 4), leader=1)
    # 4 is in sync: it is the preferred leader and takes over
    assert finish_reassignment(moving) == PartitionState((4, 3), 4, 5, (3, 4))
    # only removals: done at once; 3 leads the target (3,) since 1 leaves
    shrinking = start_reassignment(STATE, (3,))
    assert (shrinking.adding, shrinking.removing) == ((), (1, 2))
    assert finish_reassignment(shrinking) == PartitionState((3,), 3, 5, (3,))
    # a kept leader stays when the preferred leader is not in sync
    lagging = start_reassignment(STATE._replace(isr=(1, 2)), (3, 1))
    assert finish_reassignment(lagging) == PartitionState((3, 1), 1, 4, (1,))
    # only removals, and what stays is not in sync: wait
    behind = start_reassignment(STATE._replace(isr=(1,)), (3, 2))._replace(isr=(1,))
    assert finish_reassignment(behind) is None


def test_a_reordering_takes_effect_at_once_and_a_same_target_changes_nothing() -> None:
    assert start_reassignment(STATE, (3, 1, 2)) == STATE._replace(replicas=(3, 1, 2))
    assert start_reassignment(STATE, (1, 2, 3)) == STATE
    assert finish_reassignment(STATE) is None


def test_an_offline_partition_does_not_finish_its_reassignment() -> None:
    moving = start_reassignment(STATE, (4, 2, 3))._replace(isr=(1, 2, 3, 4), leader=NO_LEADER)
    assert finish_reassignment(moving) is None


def test_a_cancel_goes_back_to_the_original_replicas() -> None:
    moving = start_reassignment(STATE, (4, 2, 3))._replace(isr=(1, 2, 3, 4))
    assert cancel_reassignment(moving) == PartitionState((2, 3, 1), 1, 4, (1, 2, 3))
    assert cancel_reassignment(STATE) is STATE
    # a new replica that leads hands leadership back to an original one
    led_by_new = moving._replace(leader=4, leader_epoch=5)
    assert cancel_reassignment(led_by_new) == PartitionState((2, 3, 1), 2, 6, (1, 2, 3))
    only_new_in_sync = moving._replace(leader=4, isr=(4,))
    with pytest.raises(InvalidReplicaAssignmentError, match="none of replicas"):
        cancel_reassignment(only_new_in_sync)


def test_a_new_target_replaces_the_one_in_progress() -> None:
    moving = start_reassignment(STATE, (4, 5, 6))._replace(isr=(1, 2, 3, 4))
    again = start_reassignment(moving, (1, 5))
    assert again == PartitionState((1, 5, 2, 3), 1, 4, (1, 2, 3), (5,), (2, 3))
    assert start_reassignment(moving, (3, 2, 1)) == STATE._replace(replicas=(3, 2, 1))


@pytest.mark.parametrize(
    ("target", "match"),
    [((), "at least one"), ((1, 2, 1), "twice"), ((1, -2), "negative")],
)
def test_invalid_targets_are_refused(target: tuple[int, ...], match: str) -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=match):
        start_reassignment(STATE, target)


# -- rebalancing -------------------------------------------------------------------------


def moves_of(
    states: dict[tuple[str, int], PartitionState], plan: dict[tuple[str, int], tuple[int, ...]]
) -> int:
    """Replicas that change brokers (reordering moves no data)."""
    return sum(len(set(states[key].target) - set(replicas)) for key, replicas in plan.items())


def fewest_moves(states: dict[tuple[str, int], PartitionState], brokers: set[int]) -> int:
    """The fewest replica moves that even out the replicas over ``brokers`` (brute force)."""
    keys = sorted(states)
    choices = [itertools.combinations(sorted(brokers), len(states[k].target)) for k in keys]
    best = None
    for choice in itertools.product(*choices):
        held = Counter(r for replicas in choice for r in replicas)
        if max(held.get(b, 0) for b in brokers) - min(held.get(b, 0) for b in brokers) > 1:
            continue
        moves = sum(len(set(states[k].target) - set(c)) for k, c in zip(keys, choice, strict=True))
        best = moves if best is None else min(best, moves)
    assert best is not None
    return best


def best_leader_spread(lists: list[tuple[int, ...]], brokers: set[int]) -> int:
    """The smallest max - min count of preferred leaders over every choice (brute force)."""
    best = None
    for choice in itertools.product(*lists):
        counts = Counter(choice)
        spread = max(counts.get(b, 0) for b in brokers) - min(counts.get(b, 0) for b in brokers)
        best = spread if best is None else min(best, spread)
    return best or 0


@st.composite
def clusters(
    draw: st.DrawFn, max_partitions: int = 40, max_brokers: int = 8
) -> tuple[dict[tuple[str, int], PartitionState], set[int]]:
    """Partitions placed over some brokers, and the brokers to spread them over
    (some old ones gone, new ones empty)."""
    ids = st.integers(0, max_brokers + 4)
    old = draw(st.sets(ids, min_size=1, max_size=max_brokers))
    brokers = draw(st.sets(ids, min_size=1, max_size=max_brokers))
    limit = min(len(old), len(brokers))
    states = {}
    for t in range(draw(st.integers(1, 3))):
        rf = draw(st.integers(1, limit))
        for p in range(draw(st.integers(0, max_partitions // 3))):
            replicas = draw(st.permutations(sorted(old)))[:rf]
            states[(f"t{t}", p)] = PartitionState.new(replicas)
    return states, brokers


@settings(max_examples=300)
@given(cluster=clusters())
def test_a_rebalance_spreads_replicas_evenly(
    cluster: tuple[dict[tuple[str, int], PartitionState], set[int]],
) -> None:
    states, brokers = cluster
    plan = rebalance_plan(states, brokers)
    assert plan == rebalance_plan(dict(reversed(states.items())), sorted(brokers))  # determinism
    after = {key: plan.get(key, s.replicas) for key, s in states.items()}
    for key, replicas in after.items():
        assert len(replicas) == len(states[key].replicas)
        assert len(set(replicas)) == len(replicas)
        assert set(replicas) <= brokers
    for key, replicas in plan.items():
        assert replicas != states[key].replicas
    held = Counter(r for replicas in after.values() for r in replicas)
    counts = [held.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    # a balanced cluster stays as it is
    rebalanced = {key: PartitionState.new(replicas) for key, replicas in after.items()}
    assert rebalance_plan(rebalanced, brokers) == {}


@settings(max_examples=300)
@given(cluster=clusters(max_partitions=4, max_brokers=5))
def test_a_rebalance_moves_as_few_replicas_as_an_even_spread_allows(
    cluster: tuple[dict[tuple[str, int], PartitionState], set[int]],
) -> None:
    states, brokers = cluster
    assert moves_of(states, rebalance_plan(states, brokers)) == fewest_moves(states, brokers)


@settings(max_examples=300)
@given(cluster=clusters(max_partitions=7))
def test_a_rebalance_spreads_preferred_leaders_as_evenly_as_the_replicas_allow(
    cluster: tuple[dict[tuple[str, int], PartitionState], set[int]],
) -> None:
    states, brokers = cluster
    plan = rebalance_plan(states, brokers)
    after = [plan.get(key, s.replicas) for key, s in states.items()]
    leaders = Counter(replicas[0] for replicas in after)
    spread = max(leaders.get(b, 0) for b in brokers) - min(leaders.get(b, 0) for b in brokers)
    best = best_leader_spread(after, brokers)
    assert spread <= max(best, 1)


def test_a_new_broker_gets_its_share_of_replicas_and_leaders() -> None:
    placed = assign_replicas([1, 2, 3], 6, 2, start=0)
    states = {("t", p): PartitionState.new(r) for p, r in enumerate(placed)}
    plan = rebalance_plan(states, {1, 2, 3, 4})
    after = [plan.get(key, s.replicas) for key, s in states.items()]
    assert Counter(r for replicas in after for r in replicas) == {1: 3, 2: 3, 3: 3, 4: 3}
    assert sorted(Counter(replicas[0] for replicas in after).values()) == [1, 1, 2, 2]
    assert moves_of(states, plan) == 3


def test_a_rebalance_counts_a_reassignment_in_progress_by_its_target() -> None:
    states = {("t", 0): start_reassignment(PartitionState.new((1, 2)), (3, 2))}
    assert rebalance_plan(states, {1, 2, 3}) == {}
    assert rebalance_plan(states, {1, 2}) == {("t", 0): (1, 2)}


def test_a_rebalance_needs_enough_brokers() -> None:
    states = {("t", 0): PartitionState.new((1, 2, 3))}
    with pytest.raises(InvalidReplicationFactorError, match="3 replicas, there are 2 brokers"):
        rebalance_plan(states, {1, 2})

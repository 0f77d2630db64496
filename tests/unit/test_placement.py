"""Replica placement and leader election: the controller's pure decisions."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mq.errors import InvalidReplicationFactorError
from mq.replication.placement import (
    NO_LEADER,
    PartitionState,
    assign_replicas,
    elect_leader,
    preferred_leader_election,
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

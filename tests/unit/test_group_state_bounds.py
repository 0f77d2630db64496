"""Issue 18, F7: what a member claims to own in its heartbeat cannot grow the group's state."""

from __future__ import annotations

from mq.groups.assignors import Subscription, TopicPartition
from mq.groups.rebalance import GroupAssignment


def test_claimed_partitions_outside_the_groups_topics_are_revoked_not_recorded() -> None:
    group = GroupAssignment()
    group.set_partitions({"t": 2})
    group.join("m", Subscription(frozenset({"t"})))
    bogus = {TopicPartition(f"x{i}", p) for i in range(1_000) for p in range(10)}
    bogus |= {TopicPartition("t", p) for p in range(2, 500)}  # past t's partition count
    view = group.heartbeat("m", bogus | {TopicPartition("t", 0)})
    assert view.assignment == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert view.revoke == bogus  # the member is told to give them up...
    assert group.owned("m") == view.assignment  # ...and the coordinator keeps none of them
    assert group.is_stable()


def test_a_deferred_group_runs_the_assignor_once_for_a_storm_of_joins() -> None:
    """Each recomputation is O(members + partitions): one per join made N joins O(N^2).
    The coordinator's groups are deferred and flushed once per tick."""
    group = GroupAssignment(deferred=True)
    group.set_partitions({"t": 100})
    for i in range(500):
        group.join(f"m{i:03d}", Subscription(frozenset({"t"})))
        assert group.target(f"m{i:03d}") == frozenset()  # nothing yet: no assignor run
    assert group.generation == 0
    assert group.stale
    assert not group.is_stable()
    assert group.flush()
    assert group.generation == 1  # one run for the 500 joins
    assert sum(len(group.target(m)) for m in group.members) == 100
    assert not group.flush()  # nothing changed since
    eager = GroupAssignment()
    eager.set_partitions({"t": 100})
    for i in range(500):
        eager.join(f"m{i:03d}", Subscription(frozenset({"t"})))
    assert eager.generation == 100  # a run per join (the first 100 each changed the target)

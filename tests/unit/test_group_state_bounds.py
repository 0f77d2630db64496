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

"""Broker epochs, the pure parts: what the controller makes of a partition whose leader
registered again after its state was written, and the view's broker epochs."""

from __future__ import annotations

import msgpack

from mq.replication.cluster_state import ClusterView
from mq.replication.controller import after_restart
from mq.replication.membership import broker_key
from mq.replication.placement import PartitionState
from mq.replication.store import EventKind, WatchEvent

STATE = PartitionState((1, 2, 3), 1, 4, (1, 2))


def test_another_live_in_sync_replica_takes_over_in_a_new_epoch() -> None:
    moved = after_restart(STATE, seen=STATE, live={1, 2, 3})
    assert (moved.leader, moved.leader_epoch, moved.isr) == (2, 5, (2,))


def test_with_no_other_in_sync_replica_the_leader_leads_again_in_a_new_epoch() -> None:
    alone = STATE._replace(isr=(1,))
    again = after_restart(alone, seen=alone, live={1, 2, 3})
    assert (again.leader, again.leader_epoch, again.isr) == (1, 5, (1,))
    dead_follower = after_restart(STATE, seen=STATE, live={1, 3})
    assert (dead_follower.leader, dead_follower.leader_epoch, dead_follower.isr) == (1, 5, (1,))


def test_a_state_that_changed_since_it_was_seen_is_left_alone() -> None:
    newer = STATE._replace(leader_epoch=5)
    assert after_restart(newer, seen=STATE, live={1, 2, 3}) == newer


def test_the_view_keeps_each_registration_revision_as_the_broker_epoch() -> None:
    view = ClusterView()
    value = msgpack.packb([1, "127.0.0.1", 9092])
    view.apply(WatchEvent(EventKind.PUT, broker_key(1), value, 7))
    assert view.broker_epochs == {1: 7}
    view.apply(WatchEvent(EventKind.DELETE, broker_key(1), b"", 9))
    view.apply(WatchEvent(EventKind.PUT, broker_key(1), value, 12))  # a restart
    assert view.broker_epochs == {1: 12}

"""The cooperative rebalance protocol, static membership and session deadlines."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest
from group_strategies import (
    TP,
    Counts,
    check_complete,
    counts,
    subscriptions,
)
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from mq.errors import InvalidRequestError, UnknownMemberIdError
from mq.groups.assignors import (
    ASSIGNORS,
    Subscription,
)
from mq.groups.rebalance import GroupAssignment, MemberView, Sessions

# -- GroupAssignment: examples ------------------------------------------------------------------

T = frozenset({"t"})


def tps(*partitions: int, topic: str = "t") -> frozenset[TP]:
    return frozenset(TP(topic, p) for p in partitions)


def test_a_partition_moves_only_after_its_owner_revoked_it() -> None:
    group = GroupAssignment("range")
    group.set_partitions({"t": 4})
    assert group.state() == "Empty"
    group.join("m1", Subscription(T))
    assert group.heartbeat("m1", []) == MemberView(tps(0, 1, 2, 3), tps())
    assert group.state() == "Stable"
    generation = group.generation
    group.join("m2", Subscription(T))
    assert group.generation == generation + 1
    assert group.state() == "Reconciling"
    # m2 asks first: t2 and t3 are still m1's.
    assert group.heartbeat("m2", []) == MemberView(tps(), tps())
    assert group.heartbeat("m1", tps(0, 1, 2, 3)) == MemberView(tps(0, 1), tps(2, 3))
    assert group.revoking() == ["m1"]
    assert group.heartbeat("m2", []) == MemberView(tps(), tps())
    # m1 revoked them: its next heartbeat frees them, and m2 gets them.
    assert group.heartbeat("m1", tps(0, 1)) == MemberView(tps(0, 1), tps())
    assert group.revoking() == []
    assert group.heartbeat("m2", []) == MemberView(tps(2, 3), tps())
    assert group.state() == "Stable"
    # Nothing changed: same target, same generation.
    group.set_partitions({"t": 4})
    assert group.generation == generation + 1


def test_a_leaving_member_frees_its_partitions_at_once() -> None:
    group = GroupAssignment("roundrobin")
    group.set_partitions({"t": 2})
    group.join("m1", Subscription(T))
    group.join("m2", Subscription(T))
    group.heartbeat("m1", [])
    group.heartbeat("m2", [])
    group.leave("m1")
    assert group.heartbeat("m2", tps(1)) == MemberView(tps(0, 1), tps())
    with pytest.raises(UnknownMemberIdError):
        group.heartbeat("m1", [])
    with pytest.raises(UnknownMemberIdError):
        group.leave("m1")


def test_a_static_member_that_rejoins_takes_over_without_a_rebalance() -> None:
    group = GroupAssignment("sticky")
    group.set_partitions({"t": 4})
    group.join("m1", Subscription(T, "host-1"))
    group.join("m2", Subscription(T))
    for member_id in ("m1", "m2"):
        group.heartbeat(member_id, [])
    targets, generation = (group.target("m1"), group.target("m2")), group.generation
    assert group.join("m3", Subscription(T, "host-1")) == "m1"
    assert group.member_for_instance("host-1") == "m3"
    assert (group.target("m3"), group.target("m2")) == targets
    assert group.generation == generation
    assert group.heartbeat("m3", []) == MemberView(targets[0], tps())
    with pytest.raises(UnknownMemberIdError):
        group.heartbeat("m1", [])
    # Expelled (session over) before it came back: it joins as a new member.
    group.leave("m3")
    assert group.member_for_instance("host-1") is None
    assert group.join("m4", Subscription(T, "host-1")) is None


def test_a_static_rejoin_with_a_new_subscription_retargets() -> None:
    group = GroupAssignment("sticky")
    group.set_partitions({"t": 2, "u": 2})
    group.join("m1", Subscription(T, "host-1"))
    assert group.join("m2", Subscription(frozenset({"u"}), "host-1")) == "m1"
    assert group.target("m2") == tps(0, 1, topic="u")


def test_a_member_cannot_change_its_instance_id() -> None:
    group = GroupAssignment()
    group.join("m1", Subscription(T, "host-1"))
    with pytest.raises(InvalidRequestError):
        group.join("m1", Subscription(T, "host-2"))


def test_a_member_reporting_another_members_partition_must_revoke_it() -> None:
    group = GroupAssignment("range")
    group.set_partitions({"t": 2})
    group.join("m1", Subscription(T))
    group.join("m2", Subscription(T))
    group.heartbeat("m1", [])
    assert group.heartbeat("m2", tps(0, 1)) == MemberView(tps(1), tps(0))
    assert group.owned("m1") == tps(0)
    assert group.owned("m2") == tps(1)


def test_a_member_reporting_a_partition_still_being_revoked_must_give_it_up() -> None:
    group = GroupAssignment("range")
    group.set_partitions({"t": 2})
    group.join("m1", Subscription(T))
    group.heartbeat("m1", [])
    group.join("m2", Subscription(T))
    assert group.target("m2") == tps(1)
    # m1 has not revoked t1 yet; m2 claims it anyway.
    assert group.heartbeat("m2", tps(1)) == MemberView(tps(), tps(1))
    assert group.owned("m1") == tps(0, 1)
    assert group.owned("m2") == tps()


def test_a_lost_answer_is_granted_again() -> None:
    group = GroupAssignment("range")
    group.set_partitions({"t": 2})
    group.join("m1", Subscription(T))
    group.heartbeat("m1", [])  # the answer never arrives
    assert group.heartbeat("m1", []) == MemberView(tps(0, 1), tps())


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown assignor"):
        GroupAssignment("cooperative")
    with pytest.raises(ValueError, match="negative"):
        GroupAssignment().set_partitions({"t": -1})
    with pytest.raises(ValueError, match="negative"):
        Sessions(lambda: 0.0).start("m", -1)


# -- Sessions -----------------------------------------------------------------------------------


@dataclass
class FakeClock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def test_sessions_expire_at_their_deadline_earliest_first() -> None:
    clock = FakeClock()
    sessions = Sessions(clock)
    assert sessions.next_deadline() is None
    sessions.start("a", 10)
    sessions.start("b", 5)
    assert ("a" in sessions, "c" in sessions, len(sessions)) == (True, False, 2)
    assert sessions.next_deadline() == 105
    clock.now = 104.9
    assert sessions.expired() == []
    clock.now = 105
    assert sessions.expired() == ["b"]
    sessions.touch("b")
    assert sessions.expired() == []
    clock.now = 111
    assert sessions.expired() == ["a", "b"]
    sessions.stop("a")
    sessions.stop("a")
    assert sessions.expired() == ["b"]
    with pytest.raises(KeyError):
        sessions.touch("a")


# -- GroupAssignment: the protocol, played by consumers -----------------------------------------


@dataclass
class Consumer:
    """What a consumer process really consumes, and what it is still revoking."""

    topics: frozenset[str]
    instance_id: str | None
    consuming: set[TP] = field(default_factory=set)
    revoking: set[TP] = field(default_factory=set)


class ProtocolMachine(RuleBasedStateMachine):
    members = Bundle("members")

    def __init__(self) -> None:
        super().__init__()
        self.consumers: dict[str, Consumer] = {}
        self.next_id = 0

    @initialize(
        assignor=st.sampled_from(sorted(ASSIGNORS)), partitions=counts, deferred=st.booleans()
    )
    def create(self, assignor: str, partitions: Counts, deferred: bool) -> None:
        """``deferred``: the coordinator's way, changes wait for a flush (its tick)."""
        self.group = GroupAssignment(assignor, deferred=deferred)
        self.group.set_partitions(partitions)

    def new_id(self) -> str:
        self.next_id += 1
        return f"m{self.next_id:03d}"

    @rule(target=members, topics=subscriptions, static=st.booleans())
    def join(self, topics: frozenset[str], static: bool) -> str:
        member_id = self.new_id()
        instance_id = f"host-{member_id}" if static else None
        assert self.group.join(member_id, Subscription(topics, instance_id)) is None
        self.consumers[member_id] = Consumer(topics, instance_id)
        return member_id

    @rule(target=members, old=consumes(members), same_topics=st.booleans(), topics=subscriptions)
    def restart(self, old: str, same_topics: bool, topics: frozenset[str]) -> str:
        """The process dies and comes back: static members take over their old id."""
        dead = self.consumers.pop(old)
        member_id = self.new_id()
        topics = dead.topics if same_topics else topics
        generation, target = self.group.generation, self.group.target(old)
        if dead.instance_id is None:
            self.group.leave(old)
        others = {m: self.group.target(m) for m in self.consumers}
        replaced = self.group.join(member_id, Subscription(topics, dead.instance_id))
        self.consumers[member_id] = Consumer(topics, dead.instance_id)
        if dead.instance_id is not None:
            assert replaced == old
            if same_topics:
                assert {m: self.group.target(m) for m in self.consumers if m != member_id} == others
                assert self.group.target(member_id) == target
                assert self.group.generation == generation
        with pytest.raises(UnknownMemberIdError):
            self.group.heartbeat(old, [])
        return member_id

    @rule(member=members, topics=subscriptions)
    def change_subscription(self, member: str, topics: frozenset[str]) -> None:
        consumer = self.consumers[member]
        consumer.topics = topics
        self.group.join(member, Subscription(topics, consumer.instance_id))

    @rule(member=consumes(members))
    def leave(self, member: str) -> None:
        """Leaving, crashing and being expelled look alike: the consumer stops."""
        del self.consumers[member]
        self.group.leave(member)

    @rule(partitions=counts)
    def change_topics(self, partitions: Counts) -> None:
        self.group.set_partitions(partitions)

    @rule(member=members, lose_answer=st.booleans())
    def heartbeat(self, member: str, lose_answer: bool) -> None:
        self.beat(member, lose_answer)

    @rule()
    def flush(self) -> None:
        """The coordinator's tick: a deferred group's stale target is recomputed."""
        was_stale = self.group.stale
        assert self.group.flush() == was_stale
        assert not self.group.stale
        if was_stale:
            event("flush: the target was stale")

    @rule(member=members)
    def acknowledge_revocation(self, member: str) -> None:
        consumer = self.consumers[member]
        consumer.consuming -= consumer.revoking
        consumer.revoking.clear()

    @rule()
    def settle(self) -> None:
        """Three rounds of prompt heartbeats and acknowledgements reach the target.

        Round 1 tells owners to revoke, round 2 frees what they revoked (and
        hands it out to members that come after them), round 3 hands out the rest.
        """
        self.flush()
        for _ in range(3):
            for member in sorted(self.consumers):
                self.beat(member, lose_answer=False)
                self.acknowledge_revocation(member)
        assert self.group.is_stable()
        assert self.group.revoking() == []
        for member, consumer in self.consumers.items():
            assert consumer.consuming == self.group.target(member)

    def beat(self, member: str, lose_answer: bool) -> None:
        consumer = self.consumers[member]
        owned = frozenset(consumer.consuming)
        target = self.group.target(member)
        view = self.group.heartbeat(member, owned)
        assert view.revoke <= owned
        assert owned <= view.assignment | view.revoke
        assert not view.revoke & target, "a partition the member keeps was revoked"
        assert view.assignment <= target
        if view.revoke:
            event("heartbeat: asked to revoke")
        if view.assignment != target:
            event("heartbeat: waiting for another member to revoke")
        if not lose_answer:
            consumer.revoking = set(view.revoke)
            consumer.consuming = set(view.assignment | view.revoke)

    @invariant()
    def no_partition_has_two_consumers(self) -> None:
        counted = Counter(tp for c in self.consumers.values() for tp in c.consuming)
        assert [tp for tp, n in counted.items() if n > 1] == []

    @invariant()
    def the_coordinator_knows_at_least_what_each_consumer_consumes(self) -> None:
        for member, consumer in self.consumers.items():
            assert consumer.consuming <= self.group.owned(member)

    @invariant()
    def the_target_is_a_complete_assignment(self) -> None:
        members = dict(self.group.members)
        assert set(members) == set(self.consumers)
        assert self.group.deferred or not self.group.stale
        if self.group.stale:
            assert not self.group.is_stable()
            return  # complete again at the next flush
        target = {m: set(self.group.target(m)) for m in members}
        check_complete(members, dict(self.group.partitions), target)

    def teardown(self) -> None:
        if hasattr(self, "group"):
            self.settle()


ProtocolMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    report_multiple_bugs=False,  # shrink one failure fast rather than each one slowly
)
TestProtocol = ProtocolMachine.TestCase

"""Assignors and the cooperative rebalance protocol, held to their properties.

Assignors: Hypothesis draws groups (members with overlapping or equal
subscriptions, static or not), topics (some empty, some nobody subscribes to,
some subscribed but missing) and arbitrary ``previous`` assignments (with
conflicts and stale partitions), and checks completeness, balance,
determinism, sticky's minimal movement and static members' stability.

Protocol: a stateful machine plays consumers that join, restart, change
subscription, leave, heartbeat (sometimes losing the answer) and take their
time to acknowledge revocations, against one :class:`GroupAssignment`. After
every step no partition is consumed by two members; a member is never asked to
revoke a partition its target keeps; and a few heartbeat rounds with prompt
acknowledgements always bring every member to own exactly its target.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import pytest
from hypothesis import assume, event, given, settings
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
    Assignment,
    Assignor,
    Subscription,
    TopicPartition,
    from_wire,
    member_order,
    range_assignor,
    roundrobin_assignor,
    sticky_assignor,
    to_wire,
)
from mq.groups.rebalance import GroupAssignment, MemberView, Sessions

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


def was_valid(tp: TP, subscription: Subscription, counts: Counts) -> bool:
    return tp.topic in subscription.topics and tp.partition < counts.get(tp.topic, 0)


V = TypeVar("V")


def renamed(mapping: Mapping[str, V], old: str, new: str) -> dict[str, V]:
    return {new if k == old else k: v for k, v in mapping.items()}


ALL = pytest.mark.parametrize("assignor", ASSIGNORS.values(), ids=ASSIGNORS.keys())

# -- every assignor -----------------------------------------------------------------------------


@ALL
@FAST
@given(data=st.data(), group=groups())
def test_every_assignor_is_complete_deterministic_and_keeps_static_members(
    assignor: Assignor, data: st.DataObject, group: tuple[Members, Counts]
) -> None:
    """Each partition to one subscriber; the same output whatever the dict and list
    order; renaming a static member (a restart: same instance id, new member id)
    only renames the output."""
    members, counts = group
    previous = data.draw(previous_of(members, counts))
    result = assignor(members, counts, previous)
    check_complete(members, counts, result)

    reversed_members = dict(reversed(members.items()))
    reversed_counts = dict(reversed(counts.items()))
    reversed_previous = {m: list(reversed(tps)) for m, tps in reversed(previous.items())}
    assert assignor(reversed_members, reversed_counts, reversed_previous) == result

    static = [m for m, s in members.items() if s.group_instance_id is not None]
    if static:
        old = data.draw(st.sampled_from(static))
        new = data.draw(member_ids.filter(lambda m: m not in members))
        after = assignor(renamed(members, old, new), counts, renamed(result, old, new))
        assert after == renamed(result, old, new)


def test_assignors_are_registered_under_their_wire_names() -> None:
    assert {
        "range": range_assignor,
        "roundrobin": roundrobin_assignor,
        "sticky": sticky_assignor,
    } == ASSIGNORS


def test_member_order_puts_static_members_first_by_instance_id() -> None:
    members = {
        "a": Subscription(frozenset("t")),
        "b": Subscription(frozenset("t"), "z"),
        "c": Subscription(frozenset("t"), "y"),
        "0": Subscription(frozenset("t")),
    }
    assert member_order(members) == ["c", "b", "0", "a"]


# -- range --------------------------------------------------------------------------------------


@FAST
@given(group=groups())
def test_range_gives_contiguous_ranges_in_member_order(group: tuple[Members, Counts]) -> None:
    members, counts = group
    result = range_assignor(members, counts, {})
    for topic, count in counts.items():
        subs = [m for m in member_order(members) if topic in members[m].topics]
        if not subs:
            continue
        per_member = [sorted(tp.partition for tp in result[m] if tp.topic == topic) for m in subs]
        assert [p for ps in per_member for p in ps] == list(range(count))
        lengths = [len(ps) for ps in per_member]
        assert lengths == sorted(lengths, reverse=True)
        assert max(lengths) - min(lengths) <= 1


def test_range_matches_kafka_on_an_example() -> None:
    t = frozenset({"t"})
    members = {"c1": Subscription(t), "c2": Subscription(t), "c3": Subscription(frozenset("u"))}
    result = range_assignor(members, {"t": 5, "u": 2}, {})
    assert result == {
        "c1": {TP("t", 0), TP("t", 1), TP("t", 2)},
        "c2": {TP("t", 3), TP("t", 4)},
        "c3": {TP("u", 0), TP("u", 1)},
    }


# -- roundrobin ---------------------------------------------------------------------------------


@FAST
@given(group=groups(same_subscription=True))
def test_roundrobin_deals_in_turn_when_subscriptions_are_equal(
    group: tuple[Members, Counts],
) -> None:
    members, counts = group
    result = roundrobin_assignor(members, counts, {})
    order = member_order(members)
    for i, tp in enumerate(sorted(assignable(members, counts))):
        assert tp in result[order[i % len(order)]]
    assert max(sizes(result)) - min(sizes(result)) <= 1


def test_roundrobin_skips_members_not_subscribed() -> None:
    members = {
        "m1": Subscription(frozenset({"t", "u"})),
        "m2": Subscription(frozenset({"u"})),
        "m3": Subscription(frozenset({"t", "u"})),
    }
    result = roundrobin_assignor(members, {"t": 3, "u": 3}, {})
    # t0->m1, t1->m3 (m2 skipped), t2->m1, u0->m2, u1->m3, u2->m1
    assert result == {
        "m1": {TP("t", 0), TP("t", 2), TP("u", 2)},
        "m2": {TP("u", 0)},
        "m3": {TP("t", 1), TP("u", 1)},
    }


# -- sticky -------------------------------------------------------------------------------------


@FAST
@given(data=st.data(), group=groups(same_subscription=True))
def test_sticky_is_balanced_and_moves_the_fewest_partitions(
    data: st.DataObject, group: tuple[Members, Counts]
) -> None:
    """Equal subscriptions: counts within one, and no balanced result keeps more."""
    members, counts = group
    previous = data.draw(disjoint_previous(members, counts))
    result = sticky_assignor(members, counts, previous)
    assert max(sizes(result)) - min(sizes(result)) <= 1
    kept = {
        m: [tp for tp in tps if was_valid(tp, members[m], counts)] for m, tps in previous.items()
    }
    moved = sum(1 for m, tps in kept.items() for tp in tps if tp not in result[m])
    # The best a balanced result can do: the r members that kept most may keep q + 1.
    q, r = divmod(len(assignable(members, counts)), len(members))
    most_first = sorted((len(tps) for tps in kept.values()), reverse=True)
    can_keep = sum(min(c, q + 1 if i < r else q) for i, c in enumerate(most_first))
    assert moved == sum(most_first) - can_keep


@FAST
@given(data=st.data(), group=groups())
def test_sticky_is_locally_balanced_and_a_fixpoint(
    data: st.DataObject, group: tuple[Members, Counts]
) -> None:
    """Any subscriptions: no member holds a partition that a subscriber with two
    fewer could take, and run again on its own output, sticky moves nothing."""
    members, counts = group
    result = sticky_assignor(members, counts, data.draw(previous_of(members, counts)))
    for holder, tps in result.items():
        for topic in {tp.topic for tp in tps}:
            for other, subscription in members.items():
                if topic in subscription.topics:
                    assert len(tps) - len(result[other]) <= 1, (holder, other, topic)
    assert sticky_assignor(members, counts, result) == result


@FAST
@given(group=groups(same_subscription=True), newcomer=member_ids, static=st.booleans())
def test_sticky_join_takes_only_what_the_newcomer_needs(
    group: tuple[Members, Counts], newcomer: str, static: bool
) -> None:
    members, counts = group
    assume(newcomer not in members)
    before = sticky_assignor(members, counts, {})
    shared = next(iter(members.values())).topics
    joined = {**members, newcomer: Subscription(shared, "new" if static else None)}
    after = sticky_assignor(joined, counts, before)
    for member_id in members:
        assert after[member_id] <= before[member_id]
    assert len(after[newcomer]) == len(assignable(members, counts)) // len(joined)


@FAST
@given(data=st.data(), group=groups(same_subscription=True))
def test_sticky_leave_only_moves_the_leavers_partitions(
    data: st.DataObject, group: tuple[Members, Counts]
) -> None:
    members, counts = group
    assume(len(members) >= 2)
    before = sticky_assignor(members, counts, {})
    leaver = data.draw(st.sampled_from(sorted(members)))
    remaining = {m: s for m, s in members.items() if m != leaver}
    after = sticky_assignor(remaining, counts, before)
    for member_id in remaining:
        assert after[member_id] >= before[member_id]
    assert max(sizes(after)) - min(sizes(after)) <= 1


def test_sticky_balances_around_members_with_fewer_choices() -> None:
    """m1 can only take t: it gets all of t, whatever the previous assignment."""
    members = {"m1": Subscription(frozenset({"t"})), "m2": Subscription(frozenset({"t", "u"}))}
    expected = {"m1": {TP("t", 0), TP("t", 1)}, "m2": {TP("u", p) for p in range(4)}}
    assert sticky_assignor(members, {"t": 2, "u": 4}, {}) == expected
    everything_to_m2 = {"m2": [TP("t", 0), TP("t", 1), TP("u", 0), TP("u", 1)]}
    assert sticky_assignor(members, {"t": 2, "u": 4}, everything_to_m2) == expected


# -- wire shapes --------------------------------------------------------------------------------


@given(st.sets(st.tuples(st.sampled_from(TOPICS), st.integers(0, 50))))
def test_wire_maps_round_trip(pairs: set[tuple[str, int]]) -> None:
    tps = {TP(t, p) for t, p in pairs}
    wire = to_wire(tps)
    assert from_wire(wire) == tps
    assert all(ps == sorted(ps) for ps in wire.values())


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

    @initialize(assignor=st.sampled_from(sorted(ASSIGNORS)), partitions=counts)
    def create(self, assignor: str, partitions: Counts) -> None:
        self.group = GroupAssignment(assignor)
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

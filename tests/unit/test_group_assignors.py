"""Assignors (range, roundrobin, sticky): complete, balanced, sticky, deterministic."""

from __future__ import annotations

import pytest
from group_strategies import (
    ALL,
    FAST,
    TOPICS,
    TP,
    Counts,
    Members,
    assignable,
    check_complete,
    disjoint_previous,
    fewest_moves,
    groups,
    member_ids,
    previous_of,
    renamed,
    sizes,
    was_valid,
)
from hypothesis import assume, given
from hypothesis import strategies as st

from mq.groups.assignors import (
    ASSIGNORS,
    Assignment,
    Assignor,
    Subscription,
    from_wire,
    member_order,
    range_assignor,
    roundrobin_assignor,
    sticky_assignor,
    to_wire,
)

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
    kept_counts = [len(tps) for tps in kept.values()]
    assert moved == fewest_moves(kept_counts, len(assignable(members, counts)), len(members))


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


# -- big groups ---------------------------------------------------------------------------------
# The coordinator runs the assignors in its event loop, so they are written to
# stay cheap for a thousand members and ten thousand partitions (see
# sticky_assignor's docstring). These tests hold them to their rules at that
# size; they time nothing.

BIG = pytest.mark.parametrize(
    ("member_count", "partition_count"),
    [(500, 5_000), (1_000, 10_000)],
    ids=["500x5000", "1000x10000"],
)


def big_group(member_count: int, partition_count: int) -> tuple[Members, Counts]:
    """Members that all subscribe to 7 topics of uneven sizes; every tenth is static."""
    topics = 7
    counts = {
        f"topic-{t}": partition_count // topics + (t < partition_count % topics)
        for t in range(topics)
    }
    shared = frozenset(counts)
    members = {
        f"member-{i:05d}": Subscription(shared, f"host-{i:05d}" if i % 10 == 0 else None)
        for i in range(member_count)
    }
    return members, counts


def per_topic_sizes(result: Assignment, topic: str) -> list[int]:
    return [sum(1 for tp in tps if tp.topic == topic) for tps in result.values()]


@ALL
@BIG
def test_every_assignor_is_complete_and_balanced_in_a_big_group(
    assignor: Assignor, member_count: int, partition_count: int
) -> None:
    """Range balances each topic (its nature), roundrobin and sticky the whole group."""
    members, counts = big_group(member_count, partition_count)
    result = assignor(members, counts, {})
    check_complete(members, counts, result)
    if assignor is range_assignor:
        for topic in counts:
            assert max(per_topic_sizes(result, topic)) - min(per_topic_sizes(result, topic)) <= 1
    else:
        assert max(sizes(result)) - min(sizes(result)) <= 1


@BIG
def test_sticky_stays_balanced_and_sticky_in_a_big_group(
    member_count: int, partition_count: int
) -> None:
    members, counts = big_group(member_count, partition_count)
    shared = next(iter(members.values())).topics
    before = sticky_assignor(members, counts, {})
    assert max(sizes(before)) - min(sizes(before)) <= 1
    assert sticky_assignor(members, counts, before) == before  # a recomputation moves nothing

    # One joins: it takes only its share, from members that had more than the new share.
    joined = {**members, "member-new": Subscription(shared)}
    after_join = sticky_assignor(joined, counts, before)
    check_complete(joined, counts, after_join)
    assert max(sizes(after_join)) - min(sizes(after_join)) <= 1
    assert all(after_join[m] <= before[m] for m in members)
    assert len(after_join["member-new"]) == partition_count // len(joined)

    # One leaves (a static one): only its partitions move.
    leaver = "member-00500" if member_count > 500 else "member-00250"
    assert members[leaver].group_instance_id is not None
    remaining = {m: s for m, s in joined.items() if m != leaver}
    after_leave = sticky_assignor(remaining, counts, after_join)
    check_complete(remaining, counts, after_leave)
    assert max(sizes(after_leave)) - min(sizes(after_leave)) <= 1
    assert all(after_leave[m] >= after_join[m] for m in remaining)

    # A skewed previous (a tenth of the members are new, the rest hold everything):
    # balanced, with the fewest partitions taken from their owners.
    old = {m: s for i, (m, s) in enumerate(members.items()) if i % 10 != 9}
    skewed = roundrobin_assignor(old, counts, {})
    result = sticky_assignor(members, counts, skewed)
    check_complete(members, counts, result)
    assert max(sizes(result)) - min(sizes(result)) <= 1
    moved = sum(len(tps - result[m]) for m, tps in skewed.items())
    assert moved == fewest_moves(sizes(skewed), partition_count, member_count)


# -- wire shapes --------------------------------------------------------------------------------


@given(st.sets(st.tuples(st.sampled_from(TOPICS), st.integers(0, 50))))
def test_wire_maps_round_trip(pairs: set[tuple[str, int]]) -> None:
    tps = {TP(t, p) for t, p in pairs}
    wire = to_wire(tps)
    assert from_wire(wire) == tps
    assert all(ps == sorted(ps) for ps in wire.values())

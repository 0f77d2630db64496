"""Quota entity resolution (KIP-257's order), store keys, describe filters."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mq.quotas import entities as q
from mq.quotas.entities import Entity, entity

ALL = [
    entity("alice", "app"),
    entity("alice", None),
    entity("alice"),
    entity(None, "app"),
    entity(None, None),
    entity(None),
    entity(client_id="app"),
    entity(client_id=None),
]
"""Every entity that can apply to (alice, app), most specific first."""
BUCKETS = [
    ("alice", "app"),
    ("alice", "app"),
    ("alice", None),
    ("alice", "app"),
    ("alice", "app"),
    ("alice", None),
    (None, "app"),
    (None, "app"),
]


@given(st.lists(st.booleans(), min_size=8, max_size=8))
def test_the_most_specific_configured_entity_wins(present: list[bool]) -> None:
    quotas: dict[Entity, dict[str, float]] = {
        ent: {q.PRODUCER_BYTE_RATE: float(i + 1)}
        for i, (ent, on) in enumerate(zip(ALL, present, strict=True))
        if on
    }
    # entities of other users and clients never apply
    quotas[entity("bob", "app")] = {q.PRODUCER_BYTE_RATE: 99.0}
    quotas[entity(client_id="other")] = {q.PRODUCER_BYTE_RATE: 98.0}
    got = q.resolve(quotas, "alice", "app", q.PRODUCER_BYTE_RATE)
    first = next((i for i, on in enumerate(present) if on), None)
    if first is None:
        assert got is None
    else:
        assert got == (BUCKETS[first], float(first + 1))


def test_each_quota_key_resolves_on_its_own() -> None:
    quotas = {
        entity("alice"): {q.PRODUCER_BYTE_RATE: 10.0},
        entity(client_id=None): {q.CONSUMER_BYTE_RATE: 20.0, q.PRODUCER_BYTE_RATE: 5.0},
    }
    assert q.resolve(quotas, "alice", "x", q.PRODUCER_BYTE_RATE) == (("alice", None), 10.0)
    assert q.resolve(quotas, "alice", "x", q.CONSUMER_BYTE_RATE) == ((None, "x"), 20.0)
    assert q.resolve(quotas, "bob", "x", q.PRODUCER_BYTE_RATE) == ((None, "x"), 5.0)
    assert q.resolve(quotas, "bob", "x", q.REQUEST_PERCENTAGE) is None


names = st.text(min_size=0, max_size=20)


@given(user=st.one_of(st.none(), st.just(False), names), client=st.one_of(st.none(), names))
def test_store_keys_round_trip(user: str | bool | None, client: str | None) -> None:
    ent = entity(user, client)
    assert q.entity_of_key(q.store_key(ent)) == ent


def test_a_name_that_reads_like_the_default_is_not_the_default() -> None:
    real = entity(q.DEFAULT_NAME)
    assert q.store_key(real) != q.store_key(entity(None))
    assert q.entity_of_key(q.store_key(real)) == real


@pytest.mark.parametrize("key", ["/quotas/", "/quotas/user", "/quotas/host/x", "/topics/a"])
def test_bad_keys_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match=r"not a quota key|names a user|unknown quota entity type"):
        q.entity_of_key(key)


def test_values_are_checked() -> None:
    q.check_value(q.REQUEST_PERCENTAGE, 100)
    for key, value in [
        (q.REQUEST_PERCENTAGE, 101),
        (q.PRODUCER_BYTE_RATE, 0),
        ("bogus", 1),
        (q.CONSUMER_BYTE_RATE, q.MAX_QUOTA_VALUE),
    ]:
        with pytest.raises(ValueError, match=r"unknown quota|must be positive|at most"):
            q.check_value(key, value)


def test_describe_filters() -> None:
    for ent, (kind, how, name), strict in itertools.product(
        ALL, [("user", 0, "alice"), ("user", 1, None), ("client-id", 2, None)], [False, True]
    ):
        parts = dict(ent)
        want = kind in parts and (
            (how == 0 and parts[kind] == name) or (how == 1 and parts[kind] is None) or how == 2
        )
        want = want and (not strict or len(parts) == 1)
        assert q.matches(ent, [(kind, how, name)], strict) == want


def test_user_of_principal() -> None:
    assert q.user_of("User:alice") == "alice"
    assert q.user_of("User:ANONYMOUS") == "ANONYMOUS"
    assert q.user_of("Broker:1") == "Broker:1"

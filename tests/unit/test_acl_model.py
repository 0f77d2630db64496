"""ACL semantics (mq.acl): examples of each rule, and the index against a reference model.

The reference model is the definition written as plainly as possible: scan
every binding, keep those whose principal, host and resource pattern match,
deny if a deny binding names the operation or ``all``, allow if an allow
binding grants it (itself, ``all`` except for delete, or an implying
operation). Hypothesis holds :class:`~mq.acl.index.AclIndex` (dicts, prefix
lengths, a decision cache cleared on change) to it through random additions,
removals and questions.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mq.acl.index import AclIndex
from mq.acl.model import (
    CLUSTER_NAME,
    MATCH_ALL,
    WILDCARD,
    AclBinding,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    binding_fields,
    binding_from_fields,
    user_principal,
)

ALICE = "User:alice"
BOB = "User:bob"
HOST = "10.0.0.1"


def allow(
    op: Operation,
    name: str = "orders",
    kind: ResourceType = ResourceType.TOPIC,
    principal: str = ALICE,
    pattern: PatternType = PatternType.LITERAL,
    host: str = WILDCARD,
) -> AclBinding:
    return AclBinding(principal, Permission.ALLOW, op, kind, name, pattern, host)


def deny(
    op: Operation,
    name: str = "orders",
    kind: ResourceType = ResourceType.TOPIC,
    principal: str = ALICE,
    pattern: PatternType = PatternType.LITERAL,
    host: str = WILDCARD,
) -> AclBinding:
    return AclBinding(principal, Permission.DENY, op, kind, name, pattern, host)


def can(
    index: AclIndex,
    op: Operation,
    name: str = "orders",
    kind: ResourceType = ResourceType.TOPIC,
    principal: str = ALICE,
    host: str = HOST,
) -> bool:
    return index.authorize(principal, host, op, kind, name)


# -- the rules, one example each ---------------------------------------------------------------


def test_nothing_is_allowed_without_a_binding() -> None:
    index = AclIndex()
    for op in Operation:
        assert not can(index, op)


def test_an_allow_grants_its_operation_on_its_resource_only() -> None:
    index = AclIndex([allow(Operation.WRITE)])
    assert can(index, Operation.WRITE)
    assert not can(index, Operation.READ)
    assert not can(index, Operation.WRITE, "other")
    assert not can(index, Operation.WRITE, "orders", ResourceType.GROUP)
    assert not can(index, Operation.WRITE, principal=BOB)


def test_deny_wins_over_allow() -> None:
    index = AclIndex([allow(Operation.READ), deny(Operation.READ)])
    assert not can(index, Operation.READ)
    index = AclIndex([allow(Operation.ALL), deny(Operation.WRITE)])
    assert not can(index, Operation.WRITE)
    assert can(index, Operation.READ)
    index = AclIndex(
        [allow(Operation.READ, "*"), deny(Operation.ALL, "ord", pattern=PatternType.PREFIXED)]
    )
    assert not can(index, Operation.READ, "orders")
    assert can(index, Operation.READ, "payments")


def test_all_grants_every_operation_but_delete() -> None:
    index = AclIndex([allow(Operation.ALL)])
    for op in Operation:
        assert can(index, op) == (op is not Operation.DELETE), op
    index.add(allow(Operation.DELETE))
    assert can(index, Operation.DELETE)


def test_a_deny_of_all_denies_delete_too() -> None:
    index = AclIndex([allow(Operation.DELETE), deny(Operation.ALL)])
    assert not can(index, Operation.DELETE)


@pytest.mark.parametrize("op", [Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER])
def test_describe_is_implied_by_read_write_delete_alter(op: Operation) -> None:
    index = AclIndex([allow(op)])
    assert can(index, Operation.DESCRIBE)
    assert not can(index, Operation.DESCRIBE_CONFIGS)


def test_describe_configs_is_implied_by_alter_configs() -> None:
    index = AclIndex([allow(Operation.ALTER_CONFIGS)])
    assert can(index, Operation.DESCRIBE_CONFIGS)
    assert not can(index, Operation.DESCRIBE)


def test_implications_go_one_way_and_denies_imply_nothing() -> None:
    assert not can(AclIndex([allow(Operation.DESCRIBE)]), Operation.READ)
    index = AclIndex([allow(Operation.DESCRIBE), deny(Operation.READ)])
    assert can(index, Operation.DESCRIBE)


def test_wildcard_principal_covers_users_only() -> None:
    index = AclIndex([allow(Operation.READ, principal="User:*")])
    assert can(index, Operation.READ, principal=ALICE)
    assert can(index, Operation.READ, principal="User:ANONYMOUS")
    assert not can(index, Operation.READ, principal="Broker:1")


def test_wildcard_and_prefixed_resources() -> None:
    index = AclIndex(
        [allow(Operation.READ, "*"), allow(Operation.WRITE, "app.", pattern=PatternType.PREFIXED)]
    )
    assert can(index, Operation.READ, "anything")
    assert can(index, Operation.WRITE, "app.orders")
    assert can(index, Operation.WRITE, "app.")
    assert not can(index, Operation.WRITE, "app")
    assert not can(index, Operation.WRITE, "xapp.orders")


def test_a_literal_star_named_resource_is_not_a_prefix() -> None:
    index = AclIndex([allow(Operation.READ, "a*", pattern=PatternType.LITERAL)])
    assert can(index, Operation.READ, "a*")
    assert not can(index, Operation.READ, "ab")


def test_hosts() -> None:
    index = AclIndex([allow(Operation.READ, host="10.0.0.2")])
    assert not can(index, Operation.READ, host=HOST)
    assert can(index, Operation.READ, host="10.0.0.2")
    index.add(deny(Operation.READ, host=HOST))
    index.add(allow(Operation.READ))
    assert not can(index, Operation.READ, host=HOST)
    assert can(index, Operation.READ, host="10.0.0.3")


def test_removing_a_binding_takes_its_grant_away() -> None:
    binding = allow(Operation.WRITE, "app.", pattern=PatternType.PREFIXED)
    index = AclIndex([binding])
    assert can(index, Operation.WRITE, "app.x")  # cached now
    assert index.remove(binding)
    assert not index.remove(binding)
    assert not can(index, Operation.WRITE, "app.x")
    assert len(index) == 0


def test_adding_twice_keeps_one() -> None:
    index = AclIndex()
    assert index.add(allow(Operation.READ))
    assert not index.add(allow(Operation.READ))
    assert len(index) == 1


def test_allowed_on_some() -> None:
    write = Operation.WRITE
    topic = ResourceType.TOPIC
    assert not AclIndex().allowed_on_some(ALICE, HOST, write, topic)
    assert AclIndex([allow(write)]).allowed_on_some(ALICE, HOST, write, topic)
    assert AclIndex([allow(Operation.ALL, "*")]).allowed_on_some(ALICE, HOST, write, topic)
    assert not AclIndex([allow(write), deny(write)]).allowed_on_some(ALICE, HOST, write, topic)
    prefixed = allow(write, "app.", pattern=PatternType.PREFIXED)
    assert AclIndex([prefixed]).allowed_on_some(ALICE, HOST, write, topic)
    covering = deny(write, "app", pattern=PatternType.PREFIXED)
    assert not AclIndex([prefixed, covering]).allowed_on_some(ALICE, HOST, write, topic)
    narrower = deny(write, "app.x", pattern=PatternType.PREFIXED)
    assert AclIndex([prefixed, narrower]).allowed_on_some(ALICE, HOST, write, topic)
    assert not AclIndex([allow(write, "*"), deny(write, "*")]).allowed_on_some(
        ALICE, HOST, write, topic
    )
    assert not AclIndex([allow(Operation.READ)]).allowed_on_some(ALICE, HOST, write, topic)
    assert not AclIndex([allow(write, kind=ResourceType.GROUP)]).allowed_on_some(
        ALICE, HOST, write, topic
    )


def test_filters() -> None:
    a, b = allow(Operation.READ), deny(Operation.WRITE, "x", principal=BOB)
    index = AclIndex([a, b])
    assert sorted(index.matching(MATCH_ALL), key=str) == sorted([a, b], key=str)
    assert index.matching(AclFilter(principal=BOB)) == [b]
    assert index.matching(AclFilter(permission=Permission.ALLOW)) == [a]
    assert index.matching(AclFilter(resource_name="x", operation=Operation.WRITE)) == [b]
    assert index.matching(AclFilter(pattern=PatternType.PREFIXED)) == []


@pytest.mark.parametrize(
    "fields",
    [
        {"principal": "alice"},
        {"principal": "User:"},
        {"resource_name": ""},
        {"resource_name": "x" * 256},
        {"resource_type": ResourceType.CLUSTER, "resource_name": "other"},
        {"pattern": PatternType.PREFIXED, "resource_name": "*"},
        {"host": ""},
    ],
)
def test_malformed_bindings_are_refused(fields: dict[str, object]) -> None:
    base: dict[str, object] = {
        "principal": ALICE,
        "permission": Permission.ALLOW,
        "operation": Operation.READ,
        "resource_type": ResourceType.TOPIC,
        "resource_name": "orders",
    }
    with pytest.raises(InvalidAclError):
        AclBinding(**{**base, **fields})  # type: ignore[arg-type]


def test_fields_round_trip_and_bad_fields_are_refused() -> None:
    binding = allow(Operation.CLUSTER_ACTION, CLUSTER_NAME, ResourceType.CLUSTER)
    assert binding_from_fields(binding_fields(binding)) == binding
    with pytest.raises(InvalidAclError, match="not an ACL binding"):
        binding_from_fields({**binding_fields(binding), "operation": "fly"})
    with pytest.raises(InvalidAclError):
        binding_from_fields({"principal": ALICE})


def test_user_principal() -> None:
    assert user_principal("alice") == ALICE
    assert user_principal("User:alice") == ALICE


# -- the index against the reference model ----------------------------------------------------

NAMES = ["a", "ab", "abc", "b", "ba", "*"]
OPERATIONS = [
    Operation.READ,
    Operation.WRITE,
    Operation.DELETE,
    Operation.DESCRIBE,
    Operation.ALTER_CONFIGS,
    Operation.DESCRIBE_CONFIGS,
    Operation.ALL,
]
"""A small domain makes collisions (the interesting cases) frequent; it has every kind
of operation: implying, implied, delete (the exception) and all."""
KINDS = [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER]
PRINCIPALS = [ALICE, BOB, "User:*"]
HOSTS = ["*", "h1", "h2"]


def reference(
    bindings: set[AclBinding],
    principal: str,
    host: str,
    op: Operation,
    kind: ResourceType,
    name: str,
) -> bool:
    """The semantics of mq.acl.model's docstring, by a plain scan."""
    implied = {
        Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
        Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
    }
    matching = []
    for b in bindings:
        who = b.principal == principal or (
            b.principal == "User:*" and principal.startswith("User:")
        )
        where = b.host in ("*", host)
        if b.pattern is PatternType.PREFIXED:
            what = b.resource_type is kind and name.startswith(b.resource_name)
        else:
            what = b.resource_type is kind and b.resource_name in (name, "*")
        if who and where and what:
            matching.append(b)
    if any(
        b.permission is Permission.DENY and b.operation in (op, Operation.ALL) for b in matching
    ):
        return False
    for b in matching:
        if b.permission is Permission.ALLOW:
            if b.operation is op or b.operation in implied.get(op, set()):
                return True
            if b.operation is Operation.ALL and op is not Operation.DELETE:
                return True
    return False


def _bindings() -> st.SearchStrategy[AclBinding]:
    def make(
        principal: str,
        permission: Permission,
        op: Operation,
        kind: ResourceType,
        name: str,
        prefixed: bool,
        host: str,
    ) -> AclBinding:
        if kind is ResourceType.CLUSTER:
            name, prefixed = CLUSTER_NAME, False
        if name == "*":
            prefixed = False
        pattern = PatternType.PREFIXED if prefixed else PatternType.LITERAL
        return AclBinding(principal, permission, op, kind, name, pattern, host)

    return st.builds(
        make,
        st.sampled_from(PRINCIPALS),
        st.sampled_from(Permission),
        st.sampled_from(OPERATIONS),
        st.sampled_from(KINDS),
        st.sampled_from(NAMES),
        st.booleans(),
        st.sampled_from(HOSTS),
    )


QUESTIONS = st.tuples(
    st.sampled_from([ALICE, BOB, "Broker:1"]),
    st.sampled_from(["h1", "h2"]),
    st.sampled_from(OPERATIONS),
    st.sampled_from(KINDS),
    st.sampled_from(["a", "ab", "abc", "abd", "b", "ba", "c", "*", CLUSTER_NAME]),
)


Question = tuple[str, str, Operation, ResourceType, str]


def _aimed(binding: AclBinding) -> st.SearchStrategy[Question]:
    """A question about what ``binding`` covers (random questions seldom hit a binding:
    these make the matching cases, and their neighbours, frequent)."""
    principal = (
        st.sampled_from([ALICE, BOB])
        if binding.principal == "User:*"
        else st.just(binding.principal)
    )
    host = st.sampled_from(["h1", "h2"]) if binding.host == "*" else st.just(binding.host)
    if binding.pattern is PatternType.PREFIXED:
        name = st.sampled_from(["", "a", "b"]).map(lambda tail: binding.resource_name + tail)
    elif binding.resource_name == "*":
        name = st.sampled_from(["a", "ab", "c"])
    else:
        name = st.just(binding.resource_name)
    return st.tuples(
        principal, host, st.sampled_from(OPERATIONS), st.just(binding.resource_type), name
    )


def _questions(bindings: set[AclBinding]) -> st.SearchStrategy[Question]:
    if not bindings:
        return QUESTIONS
    ordered = sorted(bindings, key=repr)
    return st.one_of(QUESTIONS, st.sampled_from(ordered).flatmap(_aimed))


@settings(max_examples=200, deadline=None)
@given(st.sets(_bindings(), max_size=25), st.data())
def test_index_agrees_with_the_reference(bindings: set[AclBinding], data: st.DataObject) -> None:
    index = AclIndex(bindings)
    for question in data.draw(st.lists(_questions(bindings), max_size=30)):
        assert index.authorize(*question) == reference(bindings, *question), question


class IndexMachine(RuleBasedStateMachine):
    """Additions, removals and questions in any order: the index, its cache included,
    answers as the reference does over the bindings held now."""

    def __init__(self) -> None:
        super().__init__()
        self.index = AclIndex()
        self.bindings: set[AclBinding] = set()

    @rule(binding=_bindings())
    def add(self, binding: AclBinding) -> None:
        assert self.index.add(binding) == (binding not in self.bindings)
        self.bindings.add(binding)

    @rule(binding=_bindings())
    def remove(self, binding: AclBinding) -> None:
        assert self.index.remove(binding) == (binding in self.bindings)
        self.bindings.discard(binding)

    @rule(data=st.data())
    def ask(self, data: st.DataObject) -> None:
        for question in data.draw(st.lists(_questions(self.bindings), min_size=1, max_size=5)):
            assert self.index.authorize(*question) == reference(self.bindings, *question)

    @invariant()
    def same_bindings(self) -> None:
        assert set(self.index) == self.bindings
        assert len(self.index) == len(self.bindings)


IndexMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestIndexMachine = IndexMachine.TestCase

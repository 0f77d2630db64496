"""The authorization matrix (issue 19): every API x every kind of principal.

A real in-process broker with ``authorizer = "acl"`` and a super user; each
request goes through ``Server.admit`` (the gate: broker-only checks, then the
ACL rules) and its real handler, exactly as a connection dispatches it. Only
the principal is set by the test, on a fresh :class:`RequestContext` per
request (what authentication will set; no production code path is bypassed).

Cases (:data:`CASES`): anonymous; an authenticated user with no ACL; with
exactly the ACLs the API needs; with prefixed ACLs covering its resources;
with those ACLs and a deny beside the first one; a super user; and a broker
connection. Each API (:data:`SPECS`) says which resources it needs and how
to read a refusal out of its answer (a whole-request error, a per-entry error,
or the resource left out of a listing). The test counts unauthorized
successes and wrongful refusals: both must be 0.

For the integrator: the ``Case.context`` of a case is the one seam. A case
that opens a real SASL connection ("wrong password", end to end) gives its
principal the same way once authentication sets ``ctx.principal``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inprocess_broker import running_broker

from mq.acl.index import AclIndex
from mq.acl.model import (
    CLUSTER_NAME,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from mq.broker.context import RequestContext
from mq.broker.server import Server
from mq.errors import MQError
from mq.records.records import build_batch
from mq.wire import (
    apis_acls,
    apis_cluster,
    apis_core,
    apis_data,
    apis_groups,
    apis_queues,
    apis_quotas,
    apis_security,
)
from mq.wire import apis_replication as apis_repl
from mq.wire.messages import Request
from mq.wire.registry import Api

AUTHZ_CODES = {29, 30, 31}
ALICE = "User:alice"
ROOT = "User:root"
TOPIC, GROUP, QUEUE, CLUSTER = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.QUEUE,
    ResourceType.CLUSTER,
)
T = "app.orders"
"""The topic every API asks about (made by the super user first)."""
G = "app.group"
Q = "app.queue"
PREFIX = "app."

Need = tuple[Operation, ResourceType, str]


@dataclass
class Spec:
    api: Api[Any, Any]
    needs: list[Need]
    body: Callable[[Server], dict[str, Any]]
    listed: Callable[[Any], bool] | None = None
    """For APIs that leave unauthorized resources out of a listing: whether ours is in."""
    broker_only: bool = False


def _records() -> bytes:
    return build_batch([(b"k", b"v", (), 1_700_000_000_000)])


def _parts(*fields: str) -> list[dict[str, Any]]:
    return [{"partition": 0, **{f: 0 for f in fields}}]


def _secret(server: Server) -> bytes:
    return server.broker.credentials.secret


def _names(key: str, name_key: str, wanted: str) -> Callable[[Any], bool]:
    return lambda response: any(e[name_key] == wanted for e in response[key])


NOBODY = {
    "principal": "User:nobody",
    "permission": "allow",
    "operation": "read",
    "resource_type": "topic",
    "resource_name": "zzz",
}

SPECS: list[Spec] = [
    Spec(apis_core.API_VERSIONS, [], lambda s: {}),
    Spec(apis_core.AUTHENTICATE, [], lambda s: {"mechanism": "PLAIN", "auth_bytes": b""}),
    Spec(apis_core.METADATA, [(Operation.DESCRIBE, TOPIC, T)], lambda s: {"topics": [T]}),
    Spec(
        apis_core.METADATA,
        [(Operation.DESCRIBE, TOPIC, T)],
        lambda s: {"topics": None},
        listed=_names("topics", "name", T),
    ),
    Spec(
        apis_core.METADATA,
        [(Operation.DESCRIBE, TOPIC, "app.meta"), (Operation.CREATE, TOPIC, "app.meta")],
        lambda s: {"topics": ["app.meta"], "allow_auto_topic_creation": True},
    ),
    Spec(
        apis_core.CREATE_TOPICS,
        [(Operation.CREATE, TOPIC, "app.new")],
        lambda s: {
            "topics": [{"name": "app.new", "partitions": 1, "replication_factor": 1}],
            "timeout_ms": 10_000,
        },
    ),
    Spec(
        apis_core.DESCRIBE_CONFIGS,
        [(Operation.DESCRIBE_CONFIGS, TOPIC, T)],
        lambda s: {"topics": [{"name": T}]},
    ),
    Spec(
        apis_core.ALTER_CONFIGS,
        [(Operation.ALTER_CONFIGS, TOPIC, T)],
        lambda s: {"topics": [{"name": T, "configs": {"retention.ms": "86400000"}}]},
    ),
    Spec(
        apis_core.DELETE_RECORDS,
        [(Operation.DELETE, TOPIC, T)],
        lambda s: {
            "topics": [{"name": T, "partitions": [{"partition": 0, "offset": 0}]}],
            "timeout_ms": 10_000,
        },
    ),
    Spec(
        apis_data.PRODUCE,
        [(Operation.WRITE, TOPIC, T)],
        lambda s: {
            "acks": 1,
            "timeout_ms": 10_000,
            "topics": [{"name": T, "partitions": [{"partition": 0, "records": _records()}]}],
        },
    ),
    Spec(
        apis_data.PRODUCE,
        [(Operation.WRITE, TOPIC, "app.auto"), (Operation.CREATE, TOPIC, "app.auto")],
        lambda s: {
            "acks": 1,
            "timeout_ms": 10_000,
            "topics": [
                {"name": "app.auto", "partitions": [{"partition": 0, "records": _records()}]}
            ],
        },
    ),
    Spec(
        apis_data.FETCH,
        [(Operation.READ, TOPIC, T)],
        lambda s: {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "name": T,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
    ),
    Spec(
        apis_data.LIST_OFFSETS,
        [(Operation.DESCRIBE, TOPIC, T)],
        lambda s: {"topics": [{"name": T, "partitions": [{"partition": 0, "timestamp": -1}]}]},
    ),
    Spec(
        apis_data.INIT_PRODUCER_ID,
        [(Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)],
        lambda s: {},
    ),
    Spec(apis_data.INIT_PRODUCER_ID, [(Operation.WRITE, TOPIC, T)], lambda s: {}),
    Spec(
        apis_data.DESCRIBE_PRODUCERS,
        [(Operation.READ, TOPIC, T)],
        lambda s: {"topics": [{"name": T, "partitions": [0]}]},
    ),
    Spec(apis_groups.FIND_COORDINATOR, [(Operation.DESCRIBE, GROUP, G)], lambda s: {"key": G}),
    Spec(
        apis_groups.JOIN_GROUP,
        [(Operation.READ, GROUP, "app.joiners")],
        lambda s: {
            "group_id": "app.joiners",
            "member_id": "",
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "topics": [T],
            "assignor": "range",
        },
    ),
    Spec(
        apis_groups.HEARTBEAT,
        [(Operation.READ, GROUP, G)],
        lambda s: {"group_id": G, "member_id": "m", "generation_id": 1, "owned": {}},
    ),
    Spec(
        apis_groups.LEAVE_GROUP,
        [(Operation.READ, GROUP, G)],
        lambda s: {"group_id": G, "member_id": "m"},
    ),
    Spec(
        apis_groups.OFFSET_COMMIT,
        [(Operation.READ, GROUP, G), (Operation.READ, TOPIC, T)],
        lambda s: {
            "group_id": G,
            "generation_id": -1,
            "member_id": "",
            "topics": [{"name": T, "partitions": [{"partition": 0, "offset": 1}]}],
        },
    ),
    Spec(
        apis_groups.OFFSET_FETCH,
        [(Operation.DESCRIBE, GROUP, G), (Operation.DESCRIBE, TOPIC, T)],
        lambda s: {"group_id": G, "topics": [{"name": T, "partitions": [0]}]},
    ),
    Spec(
        apis_groups.OFFSET_FETCH,
        [(Operation.DESCRIBE, GROUP, G), (Operation.DESCRIBE, TOPIC, T)],
        lambda s: {"group_id": G, "topics": None},
        listed=_names("topics", "name", T),
    ),
    Spec(apis_groups.DESCRIBE_GROUPS, [(Operation.DESCRIBE, GROUP, G)], lambda s: {"groups": [G]}),
    Spec(
        apis_groups.LIST_GROUPS,
        [(Operation.DESCRIBE, GROUP, G)],
        lambda s: {},
        listed=_names("groups", "group_id", G),
    ),
    Spec(
        apis_groups.LIST_GROUPS,
        [(Operation.DESCRIBE, CLUSTER, CLUSTER_NAME)],
        lambda s: {},
        listed=_names("groups", "group_id", G),
    ),
    Spec(
        apis_queues.QUEUE_RECEIVE,
        [(Operation.READ, QUEUE, Q), (Operation.READ, TOPIC, T)],
        lambda s: {
            "group": Q,
            "consumer_id": "c",
            "topics": [{"name": T, "partitions": [0]}],
            "max_messages": 1,
            "max_wait_ms": 0,
        },
    ),
    Spec(
        apis_queues.QUEUE_ACK,
        [(Operation.READ, QUEUE, Q), (Operation.READ, TOPIC, T)],
        lambda s: {
            "group": Q,
            "topics": [
                {
                    "name": T,
                    "settlements": [{"partition": 0, "action": 0, "offsets": [0], "counts": [1]}],
                }
            ],
        },
    ),
    Spec(
        apis_queues.DESCRIBE_QUEUE,
        [(Operation.DESCRIBE, QUEUE, Q), (Operation.DESCRIBE, TOPIC, T)],
        lambda s: {"group": Q, "topic": T, "partitions": [0]},
    ),
    Spec(apis_cluster.ELECT_LEADERS, [(Operation.ALTER, CLUSTER, CLUSTER_NAME)], lambda s: {}),
    Spec(
        apis_cluster.ALTER_PARTITION_REASSIGNMENTS,
        [(Operation.ALTER, CLUSTER, CLUSTER_NAME)],
        lambda s: {"topics": []},
    ),
    Spec(
        apis_cluster.LIST_PARTITION_REASSIGNMENTS,
        [(Operation.DESCRIBE, CLUSTER, CLUSTER_NAME)],
        lambda s: {},
    ),
    Spec(
        apis_acls.DESCRIBE_ACLS,
        [(Operation.DESCRIBE, CLUSTER, CLUSTER_NAME)],
        lambda s: {"filter": {}},
    ),
    Spec(
        apis_acls.CREATE_ACLS,
        [(Operation.ALTER, CLUSTER, CLUSTER_NAME)],
        lambda s: {"bindings": [NOBODY]},
    ),
    Spec(
        apis_acls.DELETE_ACLS,
        [(Operation.ALTER, CLUSTER, CLUSTER_NAME)],
        lambda s: {"filters": [{"principal": "User:nobody"}]},
    ),
    Spec(
        apis_security.DESCRIBE_USER_SCRAM_CREDENTIALS,
        [(Operation.DESCRIBE, CLUSTER, CLUSTER_NAME)],
        lambda s: {},
    ),
    Spec(
        apis_security.ALTER_USER_SCRAM_CREDENTIALS,
        [(Operation.ALTER, CLUSTER, CLUSTER_NAME)],
        lambda s: {"deletions": [{"user": "nobody"}]},
    ),
    Spec(
        apis_quotas.DESCRIBE_CLIENT_QUOTAS,
        [(Operation.DESCRIBE_CONFIGS, CLUSTER, CLUSTER_NAME)],
        lambda s: {"components": []},
    ),
    Spec(
        apis_quotas.ALTER_CLIENT_QUOTAS,
        [(Operation.ALTER_CONFIGS, CLUSTER, CLUSTER_NAME)],
        lambda s: {"entries": [], "validate_only": True},
    ),
    Spec(
        apis_repl.BROKER_HELLO,
        [(Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)],
        lambda s: {"node_id": 7, "secret": _secret(s)},
    ),
    Spec(
        apis_repl.REPLICA_FETCH,
        [],
        lambda s: {
            "replica_id": 7,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "topics": [{"name": T, "partitions": [{"partition": 0, "fetch_offset": 0}]}],
        },
        broker_only=True,
    ),
    Spec(
        apis_repl.INTERNAL_APPEND,
        [],
        lambda s: {"topic": T, "partition": 0, "records": _records(), "timeout_ms": 10_000},
        broker_only=True,
    ),
    # last: it deletes its topic
    Spec(
        apis_core.DELETE_TOPICS,
        [(Operation.DELETE, TOPIC, "app.doomed")],
        lambda s: {"topics": ["app.doomed"], "timeout_ms": 10_000},
    ),
]


# -- the cases ---------------------------------------------------------------------------------


def _binding(permission: Permission, need: Need, *, prefixed: bool = False) -> AclBinding:
    op, kind, name = need
    if prefixed and kind is not CLUSTER:
        return AclBinding(ALICE, permission, op, kind, PREFIX, PatternType.PREFIXED)
    return AclBinding(ALICE, permission, op, kind, name)


@dataclass
class Case:
    name: str
    principal: str
    grants: Callable[[Spec], list[AclBinding]] = field(default=lambda spec: [])
    broker: bool = False

    def allowed(self, spec: Spec) -> bool:
        """What the case must get: the truth the broker is held to."""
        if spec.broker_only:
            return self.broker
        if self.broker or self.principal == ROOT or not spec.needs:
            return True
        return self.name in ("exact", "prefixed")

    def context(self, connection_id: int) -> RequestContext:
        """The request's context as authentication would leave it (the seam for SASL)."""
        ctx = RequestContext(connection_id, "127.0.0.1:40000", "matrix", self.principal)
        if self.broker:
            ctx.broker_id = 7
        return ctx


CASES = [
    Case("anonymous", "User:ANONYMOUS"),
    Case("no ACL", ALICE),
    Case("exact", ALICE, lambda spec: [_binding(Permission.ALLOW, n) for n in spec.needs]),
    Case(
        "prefixed",
        ALICE,
        lambda spec: [_binding(Permission.ALLOW, n, prefixed=True) for n in spec.needs],
    ),
    Case(
        "deny beside allow",
        ALICE,
        lambda spec: (
            [_binding(Permission.ALLOW, n) for n in spec.needs]
            + [_binding(Permission.DENY, n) for n in spec.needs[:1]]
        ),
    ),
    Case("super user", ROOT),
    Case("broker", "Broker:7", broker=True),
]


# -- running them ------------------------------------------------------------------------------


async def _call(
    server: Server, ctx: RequestContext, api: Api[Any, Any], body: Any
) -> tuple[int, Any]:
    """The request through the gate and its handler, as a connection runs it."""
    body = api.request.validate(copy.deepcopy(body), 0, api.name)
    request = Request(api, 0, 1, "matrix", body)
    try:
        handler = server.admit(request, ctx)
        return 0, await handler(server.broker, ctx, body)
    except MQError as exc:
        return exc.code, str(exc)


def _authz_errors(value: Any) -> list[int]:
    if isinstance(value, dict):
        found = [value["error"]] if value.get("error") in AUTHZ_CODES else []
        return found + [c for v in value.values() for c in _authz_errors(v)]
    if isinstance(value, list):
        return [c for v in value for c in _authz_errors(v)]
    return []


def _refused(spec: Spec, code: int, response: Any) -> bool:
    if code:
        return code in AUTHZ_CODES
    if _authz_errors(response):
        return True
    return spec.listed is not None and not spec.listed(response)


async def _setup(server: Server) -> None:
    root = RequestContext(0, "127.0.0.1:1", "setup", ROOT)
    for name in (T, "app.doomed"):
        await _call(
            server,
            root,
            apis_core.CREATE_TOPICS,
            {
                "topics": [{"name": name, "partitions": 1, "replication_factor": 1}],
                "timeout_ms": 10_000,
            },
        )
    commit = {
        "group_id": G,
        "generation_id": -1,
        "member_id": "",
        "topics": [{"name": T, "partitions": [{"partition": 0, "offset": 0}]}],
    }
    code, response = await _call(server, root, apis_groups.OFFSET_COMMIT, commit)
    assert code == 0, response
    assert not _authz_errors(response), response


async def test_every_api_for_every_principal(tmp_path: Path) -> None:
    async with running_broker(
        tmp_path / "data", authorizer="acl", super_users=("root",), offsets_partitions=1
    ) as running:
        server = running.server
        covered = {spec.api.key for spec in SPECS}
        assert covered >= set(server.handlers), "every API served is in the matrix"
        await _setup(server)
        cache = server.authorizer.cache
        wrongful_refusals: list[str] = []
        unauthorized_successes: list[str] = []
        ids = iter(range(1, 1_000_000))
        for spec in SPECS:
            for case in CASES:
                cache.index = AclIndex(case.grants(spec))
                code, response = await _call(
                    server, case.context(next(ids)), spec.api, spec.body(server)
                )
                refused = _refused(spec, code, response)
                where = (
                    f"{spec.api.name} ({spec.needs}) as {case.name}: code {code}, {response!r:.300}"
                )
                if case.allowed(spec) and refused:
                    wrongful_refusals.append(where)
                elif not case.allowed(spec) and not refused:
                    unauthorized_successes.append(where)
        cache.index = AclIndex()
        assert unauthorized_successes == []
        assert wrongful_refusals == []


async def test_refusals_name_the_principal_operation_and_resource(tmp_path: Path) -> None:
    async with running_broker(
        tmp_path / "data", authorizer="acl", super_users=("root",)
    ) as running:
        server = running.server
        await _setup(server)
        ctx = Case("anonymous", "User:ANONYMOUS").context(1)
        spec = next(s for s in SPECS if s.api is apis_data.PRODUCE)
        code, response = await _call(server, ctx, spec.api, spec.body(server))
        assert code == 0
        (partition,) = response["topics"][0]["partitions"]
        assert partition["error"] == 29
        assert partition["message"] == (
            "User:ANONYMOUS is not authorized to WRITE topic 'app.orders' (no ACL allows it)"
        )
        code, message = await _call(server, ctx, apis_cluster.ELECT_LEADERS, {})
        assert code == 31
        assert message == "User:ANONYMOUS is not authorized to ALTER the cluster (no ACL allows it)"
        heartbeat = next(s for s in SPECS if s.api is apis_groups.HEARTBEAT)
        code, message = await _call(server, ctx, heartbeat.api, heartbeat.body(server))
        assert (code, message) == (
            30,
            "User:ANONYMOUS is not authorized to READ group 'app.group' (no ACL allows it)",
        )


async def test_a_refused_topic_does_not_stop_the_allowed_one(tmp_path: Path) -> None:
    """Per-topic answers: the allowed topic is appended, the other refused, in one request."""
    async with running_broker(
        tmp_path / "data", authorizer="acl", super_users=("root",)
    ) as running:
        server = running.server
        await _setup(server)
        server.authorizer.cache.index = AclIndex(
            [_binding(Permission.ALLOW, (Operation.WRITE, TOPIC, T))]
        )
        body = {
            "acks": 1,
            "timeout_ms": 10_000,
            "topics": [
                {"name": T, "partitions": [{"partition": 0, "records": _records()}]},
                {"name": "app.doomed", "partitions": [{"partition": 0, "records": _records()}]},
            ],
        }
        code, response = await _call(server, Case("a", ALICE).context(1), apis_data.PRODUCE, body)
        assert code == 0
        results = {t["name"]: t["partitions"][0] for t in response["topics"]}
        assert results[T]["error"] == 0
        assert results[T]["base_offset"] >= 0
        assert results["app.doomed"]["error"] == 29


async def test_authorization_off_by_default_allows_everyone(tmp_path: Path) -> None:
    """The zero-config broker: anonymous may do anything, and the ACL APIs say so."""
    async with running_broker(tmp_path / "data") as running:
        server = running.server
        assert not server.authorizer.enabled
        ctx = Case("anonymous", "User:ANONYMOUS").context(1)
        spec = next(s for s in SPECS if s.api is apis_data.PRODUCE)
        code, response = await _call(server, ctx, spec.api, spec.body(server))
        assert code == 0
        assert not _authz_errors(response)
        code, message = await _call(server, ctx, apis_acls.DESCRIBE_ACLS, {"filter": {}})
        assert code == 54, message

"""What each API needs from the ACLs (Kafka's ``KafkaApis`` checks, one rule per API).

A rule gets the authorizer, the connection's context, the request and its
handler, and returns the handler to run: the same one when the whole request
is allowed, a wrapper that hands the handler only the allowed entries and
answers the others with their error for APIs answering per topic or per group,
or it raises the refusal of the whole request. The table (also in the README):

=============================  ==============================================================
API                            needs
=============================  ==============================================================
api_versions, authenticate     nothing
metadata                       DESCRIBE topic (unlisted topics are left out of the answer;
                               named ones get TOPIC_AUTHORIZATION_FAILED); auto-creation
                               also CREATE on the cluster or the topic
produce                        WRITE topic (per topic); a topic it would auto-create also
                               CREATE on the cluster or the topic
fetch                          READ topic (per topic)
list_offsets                   DESCRIBE topic (per topic)
init_producer_id               IDEMPOTENT_WRITE cluster, or WRITE on some topic (KIP-679)
create_topics                  CREATE cluster or CREATE topic (per topic)
delete_topics, delete_records  DELETE topic (per topic; ``all`` does not grant it)
describe_configs               DESCRIBE_CONFIGS topic (per topic)
alter_configs                  ALTER_CONFIGS topic (per topic)
find_coordinator               DESCRIBE group
join_group, heartbeat,         READ group
leave_group
offset_commit                  READ group, and READ topic (per topic)
offset_fetch                   DESCRIBE group, and DESCRIBE topic (per topic; unlisted
                               topics are left out)
describe_groups                DESCRIBE group (per group)
list_groups                    DESCRIBE cluster, else only the groups with DESCRIBE group
queue_receive, queue_ack       READ queue (the share group), and READ topic (per topic)
describe_queue                 DESCRIBE queue, and DESCRIBE topic
elect_leaders,                 ALTER cluster
alter_partition_reassignments
list_partition_reassignments   DESCRIBE cluster
create_acls, delete_acls       ALTER cluster
describe_acls                  DESCRIBE cluster
broker_hello                   CLUSTER_ACTION cluster (and the inter-broker secret)
replica_fetch, internal_append a broker connection (``broker_hello``) only
=============================  ==============================================================

Thread safety: one event loop.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mq.acl.model import CLUSTER_NAME, Operation, ResourceType
from mq.broker.context import RequestContext
from mq.errors import ClusterAuthorizationFailedError, MQError
from mq.wire import (
    apis_acls,
    apis_cluster,
    apis_core,
    apis_data,
    apis_groups,
    apis_queues,
    apis_quotas,
    apis_replication,
    apis_security,
)
from mq.wire.messages import Request

if TYPE_CHECKING:
    from mq.broker.authorizer import Authorizer
    from mq.broker.broker import Broker

Handler = Callable[["Broker", RequestContext, Any], Awaitable[Any]]
Rule = Callable[["Authorizer", RequestContext, Request[Any], Handler], Handler]

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
QUEUE = ResourceType.QUEUE


def no_rule(
    authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
) -> Handler:
    """An API nobody has decided about: refused (closed by default)."""
    raise ClusterAuthorizationFailedError(
        f"{request.api.name} has no authorization rule on this broker: refused to "
        f"{ctx.principal} (only super users and brokers may call it)"
    )


def anyone(
    authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
) -> Handler:
    return handler


def cluster(operation: Operation) -> Rule:
    """The whole request needs ``operation`` on the cluster."""

    def rule(
        authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
    ) -> Handler:
        authz.require_cluster(ctx, operation)
        return handler

    return rule


def broker_only(
    authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
) -> Handler:
    """Served to broker connections only (exempt before any rule); everyone else is refused."""
    raise ClusterAuthorizationFailedError(
        f"{request.api.name} is for the cluster's brokers only ({ctx.principal} is not one)"
    )


def group_then(operation: Operation, key: str, then: Rule | None = None) -> Rule:
    """``operation`` on the group named by ``body[key]``, then the rule ``then``."""

    def rule(
        authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
    ) -> Handler:
        authz.require(ctx, operation, GROUP, request.body[key])
        return handler if then is None else then(authz, ctx, request, handler)

    return rule


def queue_then(operation: Operation, then: Rule) -> Rule:
    def rule(
        authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
    ) -> Handler:
        authz.require(ctx, operation, QUEUE, request.body["group"])
        return then(authz, ctx, request, handler)

    return rule


# -- per-entry rules: the allowed entries go to the handler, the others are answered here -----

Refused = list[tuple[Any, MQError]]
"""Request entries refused, each with its error."""


Check = Callable[["Authorizer", RequestContext, str, "Broker"], MQError | None]
"""Why an entry's name is refused (None: allowed)."""


def per_entry(
    list_key: str,
    name_of: Callable[[Any], str],
    check: Check,
    answer: Callable[[Any, MQError], Any],
    *,
    result_key: str | None = None,
) -> Rule:
    """A rule for a request whose ``body[list_key]`` entries are answered one by one in
    ``response[result_key or list_key]``: the refused entries are left out of the
    handler's body and answered with ``answer(entry, error)`` after the others. A
    name is checked once however many entries name it."""
    results_key = result_key or list_key

    def rule(
        authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
    ) -> Handler:
        async def run(broker: Broker, ctx: RequestContext, body: Any) -> Any:
            refused: Refused = []
            kept = []
            verdicts: dict[str, MQError | None] = {}
            for entry in body[list_key]:
                name = name_of(entry)
                if name not in verdicts:
                    verdicts[name] = check(authz, ctx, name, broker)
                error = verdicts[name]
                if error is None:
                    kept.append(entry)
                else:
                    refused.append((entry, error))
            if not refused:
                return await handler(broker, ctx, body)
            allowed = copy.copy(body)
            allowed[list_key] = kept
            response = await handler(broker, ctx, allowed)
            if response is not None:
                response[results_key].extend(answer(entry, error) for entry, error in refused)
            return response

        return run

    return rule


def needs(operation: Operation, resource_type: ResourceType = TOPIC) -> Check:
    def check(authz: Authorizer, ctx: RequestContext, name: str, broker: Broker) -> MQError | None:
        if authz.allowed(ctx, operation, resource_type, name):
            return None
        return authz.refusal(ctx, operation, resource_type, name)

    return check


def _named(entry: Any) -> str:
    name: str = entry["name"]
    return name


def _itself(entry: Any) -> str:
    name: str = entry
    return name


def _partitions(field: str = "partition") -> Callable[[Any, MQError], Any]:
    """A refused topic's result: each of its partitions with the error."""

    def answer(entry: Any, error: MQError) -> Any:
        return {
            "name": entry["name"],
            "partitions": [
                {"partition": p[field], "error": error.code, "message": error.message}
                for p in entry["partitions"]
            ],
        }

    return answer


def _partition_ids(extra: dict[str, Any]) -> Callable[[Any, MQError], Any]:
    def answer(entry: Any, error: MQError) -> Any:
        return {
            "name": entry["name"],
            "partitions": [
                {"partition": p, "error": error.code, "message": error.message, **extra}
                for p in entry["partitions"]
            ],
        }

    return answer


def _topic_result(name: str, error: MQError) -> Any:
    return {"name": name, "error": error.code, "message": error.message}


def _named_result(entry: Any, error: MQError) -> Any:
    return _topic_result(entry["name"], error)


def _settlements(entry: Any, error: MQError) -> Any:
    return {
        "name": entry["name"],
        "settlements": [
            {"partition": s["partition"], "error": error.code, "message": error.message}
            for s in entry["settlements"]
        ],
    }


def _group_result(group_id: str, error: MQError) -> Any:
    return {
        "group_id": group_id,
        "error": error.code,
        "message": error.message,
        "state": "",
        "assignor": "",
        "generation_id": -1,
        "members": [],
        "offsets": [],
    }


def _create_check(
    authz: Authorizer, ctx: RequestContext, name: str, broker: Broker
) -> MQError | None:
    """CREATE on the cluster or on the topic (Kafka's create_topics)."""
    if authz.allowed(ctx, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    return needs(Operation.CREATE)(authz, ctx, name, broker)


def _auto_created(operation: Operation) -> Check:
    """``operation`` on the topic, and CREATE too if the request would auto-create it
    (a topic this broker's view does not have yet, with auto-creation on)."""
    base = needs(operation)

    def check(authz: Authorizer, ctx: RequestContext, name: str, broker: Broker) -> MQError | None:
        refused = base(authz, ctx, name, broker)
        if refused is None and broker.config.auto_create_topics and broker.topic(name) is None:
            refused = _create_check(authz, ctx, name, broker)
        return refused

    return check


# -- rules that need the broker's view or filter the answer -----------------------------------


def metadata(
    authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
) -> Handler:
    """DESCRIBE per topic: an every-topic request lists only the described topics;
    named topics it would auto-create also need CREATE."""
    if request.body["topics"] is None:
        return _filtered("topics", "name", Operation.DESCRIBE, TOPIC)(authz, ctx, request, handler)
    describe = needs(Operation.DESCRIBE)
    create = _auto_created(Operation.DESCRIBE)

    def check(authz: Authorizer, ctx: RequestContext, name: str, broker: Broker) -> MQError | None:
        if request.body["allow_auto_topic_creation"]:
            return create(authz, ctx, name, broker)
        return describe(authz, ctx, name, broker)

    def answer(name: str, error: MQError) -> Any:
        return {
            "name": name,
            "error": error.code,
            "message": error.message,
            "internal": False,
            "partitions": [],
        }

    return per_entry("topics", _itself, check, answer)(authz, ctx, request, handler)


def _filtered(
    list_key: str, name_key: str, operation: Operation, resource_type: ResourceType
) -> Rule:
    """The handler's answer without the entries the principal may not ``operation``."""

    def rule(
        authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
    ) -> Handler:
        async def run(broker: Broker, ctx: RequestContext, body: Any) -> Any:
            response = await handler(broker, ctx, body)
            response[list_key] = [
                e
                for e in response[list_key]
                if authz.allowed(ctx, operation, resource_type, e[name_key])
            ]
            return response

        return run

    return rule


def offset_fetch(
    authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
) -> Handler:
    """DESCRIBE group; DESCRIBE per topic (every-topic requests: only those described)."""
    authz.require(ctx, Operation.DESCRIBE, GROUP, request.body["group_id"])
    if request.body["topics"] is not None:
        answer = _partition_ids({"offset": -1})
        return per_entry("topics", _named, needs(Operation.DESCRIBE), answer)(
            authz, ctx, request, handler
        )
    return _filtered("topics", "name", Operation.DESCRIBE, TOPIC)(authz, ctx, request, handler)


def list_groups(
    authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
) -> Handler:
    """DESCRIBE cluster lists every group; without it, the groups with DESCRIBE group."""
    if authz.allowed(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return handler
    return _filtered("groups", "group_id", Operation.DESCRIBE, GROUP)(authz, ctx, request, handler)


def init_producer_id(
    authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
) -> Handler:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (Kafka since KIP-679)."""
    if authz.allowed(ctx, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME):
        return handler
    if authz.allowed_on_some(ctx, Operation.WRITE, TOPIC):
        return handler
    raise authz.refusal(ctx, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)


def describe_queue(
    authz: Authorizer, ctx: RequestContext, request: Request[Any], handler: Handler
) -> Handler:
    authz.require(ctx, Operation.DESCRIBE, QUEUE, request.body["group"])
    authz.require(ctx, Operation.DESCRIBE, TOPIC, request.body["topic"])
    return handler


def _per_topic(operation: Operation, answer: Callable[[Any, MQError], Any]) -> Rule:
    return per_entry("topics", _named, needs(operation), answer)


RULES: dict[int, Rule] = {
    apis_core.API_VERSIONS.key: anyone,
    apis_core.AUTHENTICATE.key: anyone,
    apis_core.METADATA.key: metadata,
    apis_core.CREATE_TOPICS.key: per_entry("topics", _named, _create_check, _named_result),
    apis_core.DELETE_TOPICS.key: per_entry(
        "topics", _itself, needs(Operation.DELETE), _topic_result
    ),
    apis_core.DELETE_RECORDS.key: _per_topic(Operation.DELETE, _partitions()),
    apis_core.DESCRIBE_CONFIGS.key: _per_topic(Operation.DESCRIBE_CONFIGS, _named_result),
    apis_core.ALTER_CONFIGS.key: _per_topic(Operation.ALTER_CONFIGS, _named_result),
    apis_data.PRODUCE.key: per_entry(
        "topics", _named, _auto_created(Operation.WRITE), _partitions()
    ),
    apis_data.FETCH.key: _per_topic(Operation.READ, _partitions()),
    apis_data.LIST_OFFSETS.key: _per_topic(Operation.DESCRIBE, _partitions()),
    apis_data.INIT_PRODUCER_ID.key: init_producer_id,
    apis_data.DESCRIBE_PRODUCERS.key: _per_topic(  # Kafka's rule: READ on the topic
        Operation.READ, _partition_ids({"producers": []})
    ),
    apis_groups.FIND_COORDINATOR.key: group_then(Operation.DESCRIBE, "key"),
    apis_groups.JOIN_GROUP.key: group_then(Operation.READ, "group_id"),
    apis_groups.HEARTBEAT.key: group_then(Operation.READ, "group_id"),
    apis_groups.LEAVE_GROUP.key: group_then(Operation.READ, "group_id"),
    apis_groups.OFFSET_COMMIT.key: group_then(
        Operation.READ, "group_id", _per_topic(Operation.READ, _partitions())
    ),
    apis_groups.OFFSET_FETCH.key: offset_fetch,
    apis_groups.DESCRIBE_GROUPS.key: per_entry(
        "groups", _itself, needs(Operation.DESCRIBE, GROUP), _group_result
    ),
    apis_groups.LIST_GROUPS.key: list_groups,
    apis_queues.QUEUE_RECEIVE.key: queue_then(
        Operation.READ, _per_topic(Operation.READ, _partition_ids({}))
    ),
    apis_queues.QUEUE_ACK.key: queue_then(
        Operation.READ,
        per_entry("topics", _named, needs(Operation.READ), _settlements),
    ),
    apis_queues.DESCRIBE_QUEUE.key: describe_queue,
    apis_cluster.ELECT_LEADERS.key: cluster(Operation.ALTER),
    apis_cluster.ALTER_PARTITION_REASSIGNMENTS.key: cluster(Operation.ALTER),
    apis_cluster.LIST_PARTITION_REASSIGNMENTS.key: cluster(Operation.DESCRIBE),
    apis_acls.CREATE_ACLS.key: cluster(Operation.ALTER),
    apis_acls.DELETE_ACLS.key: cluster(Operation.ALTER),
    apis_acls.DESCRIBE_ACLS.key: cluster(Operation.DESCRIBE),
    apis_security.DESCRIBE_USER_SCRAM_CREDENTIALS.key: cluster(Operation.DESCRIBE),
    apis_security.ALTER_USER_SCRAM_CREDENTIALS.key: cluster(Operation.ALTER),
    apis_quotas.DESCRIBE_CLIENT_QUOTAS.key: cluster(Operation.DESCRIBE_CONFIGS),
    apis_quotas.ALTER_CLIENT_QUOTAS.key: cluster(Operation.ALTER_CONFIGS),
    apis_replication.BROKER_HELLO.key: cluster(Operation.CLUSTER_ACTION),
    apis_replication.REPLICA_FETCH.key: broker_only,
    apis_replication.INTERNAL_APPEND.key: broker_only,
}
"""The rule of every API (see the module's table)."""

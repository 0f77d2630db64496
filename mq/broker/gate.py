"""The one gate every request passes between dispatch and its handler.

What a connection may ask is decided here, once, not in each handler
(``../shared/STYLE.md``, 15; Kafka's ``KafkaApis.handle`` asking its
authorizer first). Today the gate knows two kinds of connection:

* a **broker** of this cluster: one that sent ``broker_hello`` with the
  cluster's inter-broker secret (:mod:`mq.replication.hello`); it may use
  every API, including the broker-to-broker ones, and the internal topics;
* a **client**: everything else. It gets CLUSTER_AUTHORIZATION_FAILED (Kafka's
  31) for the broker-to-broker APIs (``replica_fetch``, ``internal_append``),
  and TOPIC_AUTHORIZATION_FAILED (29) for the whole request when a topic
  admin request (create, delete, alter configs, delete records) names an
  internal topic (``__consumer_offsets``, ``__share_state``): their records
  and settings are the brokers' (a retention of 1 ms set by a client deleted
  every committed offset; a ``__share_state`` made in advance by a client
  kept whatever settings it chose).

Then the ACLs: :meth:`mq.broker.authorizer.Authorizer.admit` (called by
``Server.admit`` right after :func:`admit`) asks what the API needs of the
principal (:mod:`mq.broker.authorizer_rules`) when authorization is on, and
lets everything through when it is off (the zero-config default).

Thread safety: one event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from mq.broker.broker import Broker
from mq.broker.catalog import INTERNAL_TOPICS
from mq.broker.context import RequestContext
from mq.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
from mq.wire import apis_core
from mq.wire.apis_replication import (
    INTERNAL_APPEND,
    MIN_SECRET_BYTES,
    REPLICA_FETCH,
    BrokerHelloRequest,
    BrokerHelloResponse,
)
from mq.wire.messages import Request

log = logging.getLogger(__name__)

BROKER_ONLY_APIS = frozenset({REPLICA_FETCH.key, INTERNAL_APPEND.key})
"""APIs served only to connections of this cluster's brokers."""
WRONG_SECRET_LOG_INTERVAL_S = 10.0
"""At most one warning about wrong inter-broker secrets per this many seconds (with
the count of the others): a client sending hellos in a loop cannot flood the log."""
_wrong_secrets = {"last": -WRONG_SECRET_LOG_INTERVAL_S, "unlogged": 0.0}


def _named(body: Any) -> Iterable[str]:
    return (topic["name"] for topic in body["topics"])


def _listed(body: Any) -> Iterable[str]:
    names: list[str] = body["topics"]
    return names


TOPIC_ADMIN_APIS: dict[int, Callable[[Any], Iterable[str]]] = {
    apis_core.CREATE_TOPICS.key: _named,
    apis_core.DELETE_TOPICS.key: _listed,
    apis_core.ALTER_CONFIGS.key: _named,
    apis_core.DELETE_RECORDS.key: _named,
}
"""Requests that change topics, with how to read the topic names out of each body."""


def admit(ctx: RequestContext, request: Request[Any]) -> None:
    """Raise the authorization error of a request this connection may not make."""
    if ctx.broker_id is not None:
        return
    key = request.api.key
    if key in BROKER_ONLY_APIS:
        raise ClusterAuthorizationFailedError(
            f"{request.api.name} is for the cluster's brokers only"
        )
    names = TOPIC_ADMIN_APIS.get(key)
    if names is not None:
        for name in names(request.body):
            if name in INTERNAL_TOPICS:
                raise TopicAuthorizationFailedError(
                    f"{name} is an internal topic: only the brokers may {request.api.name} it"
                )


async def broker_hello(
    broker: Broker, ctx: RequestContext, body: BrokerHelloRequest
) -> BrokerHelloResponse:
    """Mark the connection as a broker's if it shows the cluster's secret."""
    credentials = broker.credentials
    if len(credentials.secret) < MIN_SECRET_BYTES or not credentials.matches(body["secret"]):
        now = time.monotonic()
        if now - _wrong_secrets["last"] >= WRONG_SECRET_LOG_INTERVAL_S:
            log.warning(  # never the secret itself
                "connection %s claiming to be broker %d showed a wrong inter-broker secret "
                "(%d more since the last warning)",
                ctx.peer,
                body["node_id"],
                _wrong_secrets["unlogged"],
            )
            _wrong_secrets.update(last=now, unlogged=0)
        else:
            _wrong_secrets["unlogged"] += 1
        raise ClusterAuthorizationFailedError(
            "the inter-broker secret does not match this cluster's"
        )
    ctx.broker_id = body["node_id"]
    ctx.principal = f"Broker:{body['node_id']}"
    return {"node_id": broker.node_id}

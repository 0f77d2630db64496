"""The authorizer: what each request needs, asked of the ACLs in the gate before its handler.

Every request passes :meth:`Authorizer.admit` (from :func:`mq.broker.gate.authorize`)
between decoding and its handler; handlers never check permissions. When
authorization is off (``authorizer = "none"``, or ``"auto"`` with no
authenticating listener: the zero-config ``mq serve``) it lets everything through
untouched. When it is on:

* a **super user** (``super_users``, ``mq serve --super-user``) and a
  **broker** connection (one that passed ``broker_hello``; see below) are let
  through;
* otherwise the API's rule (:mod:`mq.broker.authorizer_rules`, Kafka's
  ``KafkaApis``) names the operations and resources the request needs. A rule
  either refuses the whole request (TOPIC/GROUP/CLUSTER_AUTHORIZATION_FAILED,
  the message naming the principal, the operation and the resource) or, for
  APIs that answer per topic or per group, hands the handler only the entries
  the principal may touch and answers the others with the error, as Kafka does;
* an API with no rule is refused (CLUSTER_AUTHORIZATION_FAILED): a new API is
  closed until someone decides what it needs.

``broker_hello`` needs CLUSTER_ACTION on the cluster when authorization is on:
a broker shows its authenticated identity *and* the cluster's secret, so that
once listeners authenticate, brokers are the principals granted CLUSTER_ACTION
(or super users), not whoever learnt the secret.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from mq.acl.model import CLUSTER_NAME, Operation, ResourceType
from mq.broker.acl_store import AclCache
from mq.broker.authorizer_rules import RULES, Handler, no_rule
from mq.broker.config import BrokerConfig
from mq.broker.context import RequestContext
from mq.broker.listeners import listeners_of
from mq.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    MQError,
    TopicAuthorizationFailedError,
)
from mq.replication.store import MetadataStore
from mq.wire.messages import Request

log = logging.getLogger(__name__)

ERRORS: dict[ResourceType, type[MQError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailedError,
    ResourceType.GROUP: GroupAuthorizationFailedError,
    ResourceType.QUEUE: GroupAuthorizationFailedError,  # a queue is a share group (Kafka's)
    ResourceType.CLUSTER: ClusterAuthorizationFailedError,
}
"""The error of a refusal, by the resource refused."""


def authorization_on(config: BrokerConfig) -> bool:
    """Whether requests are checked against the ACLs.

    ``"auto"`` means on as soon as a listener authenticates (SASL, or TLS with
    required client certificates); the zero-config ``mq serve`` (one plaintext
    listener) allows everything.
    """
    if config.authorizer == "auto":
        return any(
            spec.sasl or (spec.tls and config.tls_client_ca is not None)
            for spec in listeners_of(config)
        )
    return config.authorizer == "acl"


def super_users_of(config: BrokerConfig) -> frozenset[str]:
    """``super_users``, and the brokers' own SASL user (``inter_broker_sasl_username``):
    every broker of a cluster logs in to the others as that user, and a broker may do
    anything (Kafka's docs make the broker principal a super user)."""
    users = set(config.super_users)
    if config.inter_broker_sasl_username:
        users.add(f"User:{config.inter_broker_sasl_username}")
    return frozenset(users)


def host_of(ctx: RequestContext) -> str:
    """The client's address without its port (what a binding's host names)."""
    host, sep, _ = ctx.peer.rpartition(":")
    return host if sep else ctx.peer


def refusal(
    ctx: RequestContext, operation: Operation, resource_type: ResourceType, name: str
) -> MQError:
    """The error for a refused request, naming the principal, operation and resource."""
    if resource_type is ResourceType.CLUSTER:
        what = "the cluster"
    else:
        what = f"{resource_type.value} {name!r}"
    return ERRORS[resource_type](
        f"{ctx.principal} is not authorized to {operation.name} {what} (no ACL allows it)"
    )


class Authorizer:
    """The ACL cache and the super users; asks them for one request (see the module)."""

    def __init__(self, config: BrokerConfig, cache: AclCache | None = None) -> None:
        self.enabled = authorization_on(config)
        self.super_users = super_users_of(config)
        self.cache = cache or AclCache()
        self._watch: asyncio.Task[None] | None = None

    async def start(self, store: MetadataStore) -> None:
        """Load the ACLs and keep them current (only when authorization is on)."""
        if not self.enabled:
            return
        await self.cache.load(store)
        self._watch = asyncio.get_running_loop().create_task(
            self.cache.follow(store), name="acl-watch"
        )
        log.info(
            "authorization on: %d ACL bindings, super users %s",
            len(self.cache.index),
            sorted(self.super_users) or "none",
        )

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None

    def exempt(self, ctx: RequestContext) -> bool:
        """Not checked: authorization off, a super user, or a broker of this cluster."""
        return not self.enabled or ctx.broker_id is not None or ctx.principal in self.super_users

    def allowed(
        self, ctx: RequestContext, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        if self.exempt(ctx):
            return True
        allowed = self.cache.index.authorize(
            ctx.principal, host_of(ctx), operation, resource_type, name
        )
        if not allowed:
            log.debug(
                "denied %s from %s: %s %s %r",
                ctx.principal,
                ctx.peer,
                operation.name,
                resource_type.name,
                name,
            )
        return allowed

    @staticmethod
    def refusal(
        ctx: RequestContext, operation: Operation, resource_type: ResourceType, name: str
    ) -> MQError:
        return refusal(ctx, operation, resource_type, name)

    def require(
        self, ctx: RequestContext, operation: Operation, resource_type: ResourceType, name: str
    ) -> None:
        """Raise the refusal unless allowed."""
        if not self.allowed(ctx, operation, resource_type, name):
            raise self.refusal(ctx, operation, resource_type, name)

    def require_cluster(self, ctx: RequestContext, operation: Operation) -> None:
        self.require(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def allowed_on_some(
        self, ctx: RequestContext, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Some resource of the type is allowed (init_producer_id: WRITE on any topic)."""
        return self.exempt(ctx) or self.cache.index.allowed_on_some(
            ctx.principal, host_of(ctx), operation, resource_type
        )

    def admit(self, ctx: RequestContext, request: Request[Any], handler: Handler) -> Handler:
        """The handler to run for ``request`` (maybe one that answers refused entries
        itself); raises the refusal of a request refused as a whole."""
        if self.exempt(ctx):
            return handler
        rule = RULES.get(request.api.key, no_rule)
        return rule(self, ctx, request, handler)

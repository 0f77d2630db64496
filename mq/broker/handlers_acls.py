"""Handlers of the ACL APIs: describe_acls, create_acls, delete_acls.

They are allowed by the gate (ALTER on the cluster to change ACLs, DESCRIBE to
list them: :mod:`mq.broker.authorizer_rules`); here they write the metadata
store and wait until this broker's cache has the change, so the client's next
request through this broker already sees it (the other brokers see it when
their watch delivers it, milliseconds later). Every change is logged with the
principal that made it. With authorization off they answer SECURITY_DISABLED,
as Kafka does without an authorizer.

Thread safety: one event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mq.acl.model import (
    AclBinding,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    binding_fields,
    binding_from_fields,
)
from mq.broker.acl_store import delete_bindings, put_bindings
from mq.broker.authorizer import Authorizer
from mq.broker.authorizer_rules import Handler
from mq.broker.broker import Broker
from mq.broker.context import RequestContext
from mq.errors import (
    InvalidRequestError,
    MQError,
    PolicyViolationError,
    RequestTimedOutError,
    SecurityDisabledError,
)
from mq.wire.apis_acls import (
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    AclFilterBody,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

log = logging.getLogger(__name__)

VISIBLE_WAIT_S = 10.0
"""How long a change waits for this broker's cache to show it before answering
REQUEST_TIMED_OUT (the store took the change; the watch is late)."""


def parse_filter(body: AclFilterBody) -> AclFilter:
    """The filter of a request body (its values were checked by the schema)."""
    return AclFilter(
        principal=body["principal"],
        permission=None if body["permission"] is None else Permission(body["permission"]),
        operation=None if body["operation"] is None else Operation(body["operation"]),
        resource_type=None
        if body["resource_type"] is None
        else ResourceType(body["resource_type"]),
        resource_name=body["resource_name"],
        pattern=None if body["pattern"] is None else PatternType(body["pattern"]),
        host=body["host"],
    )


def acl_handlers(authorizer: Authorizer) -> dict[int, Handler]:
    """The three handlers, bound to this server's authorizer (its cache and its switch)."""
    cache = authorizer.cache

    def check_on() -> None:
        if not authorizer.enabled:
            raise SecurityDisabledError(
                'authorization is off on this broker (authorizer = "none" or "auto" with no '
                'authenticating listener): set authorizer = "acl" to use ACLs'
            )

    async def visible(done: Callable[[], bool]) -> None:
        if not await cache.wait_until(done, VISIBLE_WAIT_S):
            raise RequestTimedOutError(
                "the ACL change was stored but this broker's cache did not show it in time"
            )

    async def describe_acls(
        broker: Broker, ctx: RequestContext, body: DescribeAclsRequest
    ) -> DescribeAclsResponse:
        check_on()
        found = cache.index.matching(parse_filter(body["filter"]))
        found.sort(key=_order)
        bindings: list[Any] = [binding_fields(b) for b in found]
        return {"bindings": bindings}

    async def create_acls(
        broker: Broker, ctx: RequestContext, body: CreateAclsRequest
    ) -> CreateAclsResponse:
        check_on()
        results: list[Any] = []
        new: list[AclBinding] = []
        room = broker.config.max_acls - len(cache.index)
        for fields in body["bindings"]:
            try:
                binding = binding_from_fields(fields)
                if binding not in cache.index and binding not in new:
                    if len(new) >= room:
                        raise PolicyViolationError(
                            f"the cluster holds {len(cache.index)} ACL bindings, its bound "
                            f"(max_acls = {broker.config.max_acls})"
                        )
                    new.append(binding)
            except InvalidAclError as exc:
                results.append(_error(InvalidRequestError(str(exc))))
                continue
            except MQError as exc:
                results.append(_error(exc))
                continue
            results.append({"error": 0, "message": None})
        await put_bindings(broker.store, new)
        for binding in new:
            log.info("%s from %s added the ACL: %s", ctx.principal, ctx.peer, binding.describe())
        await visible(lambda: all(b in cache.index for b in new))
        return {"results": results}

    async def delete_acls(
        broker: Broker, ctx: RequestContext, body: DeleteAclsRequest
    ) -> DeleteAclsResponse:
        check_on()
        results: list[Any] = []
        doomed: dict[AclBinding, None] = {}
        for filter_body in body["filters"]:
            matched = cache.index.matching(parse_filter(filter_body))
            matched.sort(key=_order)
            doomed.update(dict.fromkeys(matched))
            results.append(
                {"error": 0, "message": None, "deleted": [binding_fields(b) for b in matched]}
            )
        await delete_bindings(broker.store, doomed)
        for binding in doomed:
            log.info("%s from %s removed the ACL: %s", ctx.principal, ctx.peer, binding.describe())
        await visible(lambda: not any(b in cache.index for b in doomed))
        return {"results": results}

    return {
        DESCRIBE_ACLS.key: describe_acls,
        CREATE_ACLS.key: create_acls,
        DELETE_ACLS.key: delete_acls,
    }


def _error(exc: MQError) -> dict[str, Any]:
    return {"error": exc.code, "message": exc.message}


def _order(binding: AclBinding) -> tuple[str, ...]:
    return tuple(binding_fields(binding).values())

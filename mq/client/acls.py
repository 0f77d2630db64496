"""The admin client's ACL requests: describe_acls, create_acls, delete_acls.

Bindings and filters are :mod:`mq.acl.model`'s values; they travel as maps of
strings (:mod:`mq.wire.apis_acls`). Any broker answers: the bindings live in
the cluster's metadata store, and the broker that changes them waits until its
own cache shows the change, so the next request through it is already judged
by the new ACLs (the other brokers follow within milliseconds).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mq.acl.model import AclBinding, AclFilter, binding_fields, binding_from_fields
from mq.client.client import Client
from mq.errors import error_for_code
from mq.wire.apis_acls import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS


def filter_body(acl_filter: AclFilter) -> dict[str, Any]:
    def value(field: Any) -> Any:
        return getattr(field, "value", field)

    return {
        "principal": acl_filter.principal,
        "permission": value(acl_filter.permission),
        "operation": value(acl_filter.operation),
        "resource_type": value(acl_filter.resource_type),
        "resource_name": acl_filter.resource_name,
        "pattern": value(acl_filter.pattern),
        "host": acl_filter.host,
    }


def _raise_for(result: Any) -> None:
    if result["error"]:
        raise error_for_code(result["error"])(result.get("message"))


async def create_acls(client: Client, bindings: Iterable[AclBinding]) -> None:
    """Add the bindings (those already there stay as they are); raises the first error."""
    body = {"bindings": [binding_fields(b) for b in bindings]}
    response = await client.call_any(CREATE_ACLS, body)
    for result in response["results"]:
        _raise_for(result)


async def describe_acls(client: Client, acl_filter: AclFilter) -> list[AclBinding]:
    """The bindings the filter selects (AclFilter(): every binding)."""
    response = await client.call_any(DESCRIBE_ACLS, {"filter": filter_body(acl_filter)})
    return [binding_from_fields(b) for b in response["bindings"]]


async def delete_acls(client: Client, filters: Iterable[AclFilter]) -> list[AclBinding]:
    """Remove every binding some filter selects; returns those removed."""
    body = {"filters": [filter_body(f) for f in filters]}
    response = await client.call_any(DELETE_ACLS, body)
    removed: dict[AclBinding, None] = {}
    for result in response["results"]:
        _raise_for(result)
        removed.update(dict.fromkeys(binding_from_fields(b) for b in result["deleted"]))
    return list(removed)

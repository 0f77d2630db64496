"""ACL APIs: describe_acls (29), create_acls (30), delete_acls (31), Kafka's keys.

A binding on the wire is a map of strings (:func:`mq.acl.model.binding_fields`):
principal (``User:alice``, ``User:*``), permission (allow / deny), operation
(read, write, create, delete, alter, describe, describe_configs, alter_configs,
cluster_action, idempotent_write, all), resource_type (topic, group, queue,
cluster), resource_name (``*`` for every resource of the type; the cluster is
``mq-cluster``), pattern (literal / prefixed) and host (``*`` or an address).
A filter has the same fields, each None for "any" (Kafka's ``ANY``).

create_acls answers per binding; delete_acls per filter, with the bindings it
removed; a malformed binding or filter gets INVALID_REQUEST in its own result.
Every change is made on the metadata store and reaches every broker's cache by
its watch. The semantics are :mod:`mq.acl.model`'s.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from mq.wire.registry import define_api
from mq.wire.schema import Default, ErrorCode, ErrorMessage, Len, Name

MAX_ACL_BINDINGS = 100_000
"""Bindings in one describe_acls answer or one delete_acls result (a broker's
``max_acls`` default: a whole cluster's ACLs fit one answer)."""
MAX_ACL_CHANGES = 1_000
"""Bindings one create_acls, filters one delete_acls may carry: an ACL change is an
administrator's, a few at a time; a thousand is a whole tenant set up in one call."""

PermissionName = Literal["allow", "deny"]
OperationName = Literal[
    "read",
    "write",
    "create",
    "delete",
    "alter",
    "describe",
    "describe_configs",
    "alter_configs",
    "cluster_action",
    "idempotent_write",
    "all",
]
ResourceTypeName = Literal["topic", "group", "queue", "cluster"]
PatternName = Literal["literal", "prefixed"]


class AclBindingBody(TypedDict):
    principal: Name
    permission: PermissionName
    operation: OperationName
    resource_type: ResourceTypeName
    resource_name: Name
    pattern: Annotated[PatternName, Default("literal")]
    host: Annotated[Name, Default("*")]


class AclFilterBody(TypedDict):
    principal: Annotated[Name | None, Default(None)]
    permission: Annotated[PermissionName | None, Default(None)]
    operation: Annotated[OperationName | None, Default(None)]
    resource_type: Annotated[ResourceTypeName | None, Default(None)]
    resource_name: Annotated[Name | None, Default(None)]
    pattern: Annotated[PatternName | None, Default(None)]
    host: Annotated[Name | None, Default(None)]


Bindings = Annotated[list[AclBindingBody], Len(0, MAX_ACL_BINDINGS)]

# -- describe_acls (29) -----------------------------------------------------------------------


class DescribeAclsRequest(TypedDict):
    filter: AclFilterBody


class DescribeAclsResponse(TypedDict):
    bindings: Bindings


DESCRIBE_ACLS = define_api(29, "describe_acls", DescribeAclsRequest, DescribeAclsResponse)

# -- create_acls (30) -------------------------------------------------------------------------


class CreateAclsRequest(TypedDict):
    bindings: Annotated[list[AclBindingBody], Len(0, MAX_ACL_CHANGES)]


class AclCreationResult(TypedDict):
    error: ErrorCode
    message: ErrorMessage


class CreateAclsResponse(TypedDict):
    results: Annotated[list[AclCreationResult], Len(0, MAX_ACL_CHANGES)]
    """One per binding of the request, in its order."""


CREATE_ACLS = define_api(30, "create_acls", CreateAclsRequest, CreateAclsResponse)

# -- delete_acls (31) -------------------------------------------------------------------------


class DeleteAclsRequest(TypedDict):
    filters: Annotated[list[AclFilterBody], Len(0, MAX_ACL_CHANGES)]


class AclDeletionResult(TypedDict):
    error: ErrorCode
    message: ErrorMessage
    deleted: Annotated[Bindings, Default([])]
    """The bindings this filter removed."""


class DeleteAclsResponse(TypedDict):
    results: Annotated[list[AclDeletionResult], Len(0, MAX_ACL_CHANGES)]
    """One per filter of the request, in its order."""


DELETE_ACLS = define_api(31, "delete_acls", DeleteAclsRequest, DeleteAclsResponse)

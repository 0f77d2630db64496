"""Access control lists: bindings, filters and what a binding grants (pure, no I/O).

A binding says that a **principal** (``User:alice``, or ``User:*`` for every user),
connecting from a **host** (``*`` for any), is **allowed** or **denied** an
**operation** on the resources of one **type** whose name matches a **pattern**
(``literal``: the name itself, or ``*`` for every resource of the type;
``prefixed``: every name that starts with it). These are Kafka's ACLs
(``kafka-acls.sh``) with its semantics:

* a request is allowed if some allow binding matches it and no deny binding
  does (deny wins); with no matching binding it is denied;
* ``all`` matches every operation, with one exception below;
* an allow of ``read``, ``write``, ``delete`` or ``alter`` also allows
  ``describe``; an allow of ``alter_configs`` also allows ``describe_configs``
  (deny bindings imply nothing: a deny of ``read`` does not deny ``describe``).

Where mq differs from Kafka:

* **delete is an admin operation** (the seeds: ordinary users do not delete
  topics, queues or records). An allow of ``all`` does **not** grant
  ``delete``: only an allow binding naming ``delete`` itself does (or a super
  user). A deny of ``all`` still denies ``delete``.
* **queues** are a resource type of their own: a queue is a topic consumed
  through a share group, and the ``queue`` resource is named by the share
  group (a queue's own group has the queue's name, so ``--queue orders`` is the
  queue ``orders``). Receiving or settling needs ``read`` on the queue and
  ``read`` on its topic, as a consumer group needs ``read`` on the group and on
  the topic.
* the one ``cluster`` resource is named ``mq-cluster`` (Kafka's ``kafka-cluster``).

Thread safety: immutable values and pure functions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

WILDCARD = "*"
"""A literal resource name matching every resource of its type; also the any-host."""
WILDCARD_PRINCIPAL = "User:*"
"""A principal matching every ``User:`` principal (authenticated or anonymous)."""
CLUSTER_NAME = "mq-cluster"
"""The name of the one cluster resource (Kafka's ``kafka-cluster``)."""
MAX_PRINCIPAL_LEN = 255
"""A principal is ``Type:name``; user names are identifiers of at most 255 characters."""
MAX_RESOURCE_NAME_LEN = 255
"""Topic names are at most 249 characters, group and queue names 255."""
MAX_HOST_LEN = 255
"""An IPv4 or IPv6 address as text, or ``*``."""


class ResourceType(enum.Enum):
    __hash__ = object.__hash__  # members are singletons: C's identity hash, not Enum's

    TOPIC = "topic"
    GROUP = "group"
    QUEUE = "queue"
    CLUSTER = "cluster"


class Operation(enum.Enum):
    __hash__ = object.__hash__  # members are singletons: C's identity hash, not Enum's

    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    DESCRIBE_CONFIGS = "describe_configs"
    ALTER_CONFIGS = "alter_configs"
    CLUSTER_ACTION = "cluster_action"
    IDEMPOTENT_WRITE = "idempotent_write"
    ALL = "all"


class Permission(enum.Enum):
    __hash__ = object.__hash__  # members are singletons: C's identity hash, not Enum's

    ALLOW = "allow"
    DENY = "deny"


class PatternType(enum.Enum):
    __hash__ = object.__hash__  # members are singletons: C's identity hash, not Enum's

    LITERAL = "literal"
    PREFIXED = "prefixed"


class InvalidAclError(ValueError):
    """A binding or filter that cannot be stored or matched (the message says why)."""


ALLOW_IMPLIES: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}
"""For an operation asked, the operations whose allow grants it (Kafka's implied ACLs)."""


def _allowing(asked: Operation) -> frozenset[Operation]:
    granted = ALLOW_IMPLIES.get(asked, frozenset({asked}))
    return granted if asked is Operation.DELETE else granted | {Operation.ALL}


_ALLOWING = {op: _allowing(op) for op in Operation}
_DENYING = {op: frozenset({op, Operation.ALL}) for op in Operation}


def allowing_operations(asked: Operation) -> frozenset[Operation]:
    """The operations of allow bindings that grant ``asked`` (``all`` grants all but delete)."""
    return _ALLOWING[asked]


def denying_operations(asked: Operation) -> frozenset[Operation]:
    """The operations of deny bindings that refuse ``asked``: itself and ``all``."""
    return _DENYING[asked]


def user_principal(name: str) -> str:
    """``User:name`` for a bare name; a name that already has a type is kept."""
    return name if ":" in name else f"User:{name}"


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One access control entry on one resource pattern (see the module docstring)."""

    principal: str
    permission: Permission
    operation: Operation
    resource_type: ResourceType
    resource_name: str
    pattern: PatternType = PatternType.LITERAL
    host: str = WILDCARD

    def __post_init__(self) -> None:
        check_binding(self)

    def describe(self) -> str:
        """One line for logs and the CLI."""
        pattern = "prefixed " if self.pattern is PatternType.PREFIXED else ""
        return (
            f"{self.permission.value} {self.principal} {self.operation.value} on "
            f"{self.resource_type.value} {pattern}{self.resource_name!r} from host {self.host}"
        )


def check_binding(binding: AclBinding) -> None:
    """Raise InvalidAclError for a binding that is not well formed."""
    kind, sep, name = binding.principal.partition(":")
    if not sep or not kind or not name or len(binding.principal) > MAX_PRINCIPAL_LEN:
        raise InvalidAclError(
            f"principal {binding.principal!r} is not Type:name (e.g. User:alice, User:*) "
            f"of at most {MAX_PRINCIPAL_LEN} characters"
        )
    if not binding.resource_name or len(binding.resource_name) > MAX_RESOURCE_NAME_LEN:
        raise InvalidAclError(
            f"resource name must be 1 to {MAX_RESOURCE_NAME_LEN} characters, "
            f"got {binding.resource_name!r}"
        )
    if binding.pattern is PatternType.PREFIXED and binding.resource_name == WILDCARD:
        raise InvalidAclError("a prefixed pattern cannot be '*' (use a literal '*')")
    if binding.resource_type is ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        raise InvalidAclError(f"the cluster resource is named {CLUSTER_NAME!r}")
    if not binding.host or len(binding.host) > MAX_HOST_LEN:
        raise InvalidAclError(f"host must be '*' or an address, got {binding.host!r}")


def principal_matches(bound: str, principal: str) -> bool:
    """A binding's principal covers ``principal`` (``User:*`` covers every user)."""
    return bound == principal or (bound == WILDCARD_PRINCIPAL and principal.startswith("User:"))


def host_matches(bound: str, host: str) -> bool:
    return bound in (WILDCARD, host)


def resource_matches(binding: AclBinding, resource_type: ResourceType, name: str) -> bool:
    """The binding's resource pattern covers the resource ``(resource_type, name)``."""
    if binding.resource_type is not resource_type:
        return False
    if binding.pattern is PatternType.PREFIXED:
        return name.startswith(binding.resource_name)
    return binding.resource_name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which bindings describe_acls shows or delete_acls removes: every field that is
    not None must equal the binding's (Kafka's ``AclBindingFilter`` with exact matches;
    None is its ANY)."""

    principal: str | None = None
    permission: Permission | None = None
    operation: Operation | None = None
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern: PatternType | None = None
    host: str | None = None

    def matches(self, binding: AclBinding) -> bool:
        return (
            (self.principal is None or self.principal == binding.principal)
            and (self.permission is None or self.permission is binding.permission)
            and (self.operation is None or self.operation is binding.operation)
            and (self.resource_type is None or self.resource_type is binding.resource_type)
            and (self.resource_name is None or self.resource_name == binding.resource_name)
            and (self.pattern is None or self.pattern is binding.pattern)
            and (self.host is None or self.host == binding.host)
        )


MATCH_ALL = AclFilter()


def binding_fields(binding: AclBinding) -> dict[str, str]:
    """The binding as the wire's and the store's map of strings."""
    return {
        "principal": binding.principal,
        "permission": binding.permission.value,
        "operation": binding.operation.value,
        "resource_type": binding.resource_type.value,
        "resource_name": binding.resource_name,
        "pattern": binding.pattern.value,
        "host": binding.host,
    }


def binding_from_fields(fields: Mapping[str, Any]) -> AclBinding:
    """The binding of :func:`binding_fields`' map; InvalidAclError for a bad one."""
    try:
        return AclBinding(
            principal=fields["principal"],
            permission=Permission(fields["permission"]),
            operation=Operation(fields["operation"]),
            resource_type=ResourceType(fields["resource_type"]),
            resource_name=fields["resource_name"],
            pattern=PatternType(fields.get("pattern", PatternType.LITERAL.value)),
            host=fields.get("host", WILDCARD),
        )
    except (KeyError, ValueError, TypeError) as exc:
        if isinstance(exc, InvalidAclError):
            raise
        raise InvalidAclError(f"not an ACL binding: {exc}") from exc

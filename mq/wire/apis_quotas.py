"""Client quota APIs: describe_client_quotas (48) and alter_client_quotas (49), Kafka's keys.

An entity is a list of components ``{"entity_type": "user" | "client-id",
"entity_name": str | None}`` (None: the default user or client id, written
``<default>`` by the CLI). Values are integers: ``producer_byte_rate`` and
``consumer_byte_rate`` in bytes per second, ``request_percentage`` in percent
of the broker's event loop (see :mod:`mq.quotas.entities`).

Throttling on the wire: a broker that throttles a client adds
``throttle_time_ms`` (a non-negative int) to the response's body map, whatever
the API, as Kafka's responses carry it; bodies ignore keys their schema does
not name (:mod:`mq.wire.schema`), so a client that does not know it is
unaffected, and one that does waits that long before it sends more on that
connection (:data:`THROTTLE_TIME_KEY`).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypedDict

from mq.wire import limits
from mq.wire.registry import define_api
from mq.wire.schema import Default, ErrorCode, ErrorMessage, Len, Name, Range

THROTTLE_TIME_KEY: Final = "throttle_time_ms"
"""The key a throttled response's body carries the throttle time under (milliseconds)."""
MAX_QUOTA_ENTRIES: Final = 10_000
"""Entities one describe or alter names: more than any deployment configures."""
MAX_QUOTA_OPS: Final = 16
"""Changes per entity in one alter: a few quota keys, each set or removed."""

EntityType = Literal["user", "client-id"]
QuotaValue = Annotated[int, Range(1, 2**53 - 1)]


class EntityComponent(TypedDict):
    entity_type: EntityType
    entity_name: Annotated[Name | None, Default(None)]
    """None: the default entity of that type."""


Entity = Annotated[list[EntityComponent], Len(1, 2)]

# -- describe_client_quotas (48)


class QuotaFilterComponent(TypedDict):
    entity_type: EntityType
    match_type: Annotated[Literal[0, 1, 2], Default(2)]
    """0: exactly ``match``; 1: the default entity; 2: any entity of this type."""
    match: Annotated[Name | None, Default(None)]


class DescribeClientQuotasRequest(TypedDict):
    components: Annotated[list[QuotaFilterComponent], Len(0, 2)]
    """Every component must hold; none: every entity."""
    strict: Annotated[bool, Default(False)]
    """True: only entities with no other parts than the filter's."""


class QuotaEntry(TypedDict):
    entity: Entity
    values: Annotated[dict[Name, QuotaValue], Len(0, limits.MAX_CONFIGS)]


class DescribeClientQuotasResponse(TypedDict):
    entries: Annotated[list[QuotaEntry], Len(0, MAX_QUOTA_ENTRIES)]


DESCRIBE_CLIENT_QUOTAS = define_api(
    48, "describe_client_quotas", DescribeClientQuotasRequest, DescribeClientQuotasResponse
)

# -- alter_client_quotas (49)


class QuotaOp(TypedDict):
    key: Name
    value: Annotated[QuotaValue | None, Default(None)]
    remove: Annotated[bool, Default(False)]
    """True: the key goes back to what less specific entities say (``value`` ignored)."""


class AlterQuotaEntry(TypedDict):
    entity: Entity
    ops: Annotated[list[QuotaOp], Len(1, MAX_QUOTA_OPS)]


class AlterClientQuotasRequest(TypedDict):
    entries: Annotated[list[AlterQuotaEntry], Len(0, MAX_QUOTA_ENTRIES)]
    validate_only: Annotated[bool, Default(False)]


class AlterQuotaResult(TypedDict):
    entity: Entity
    error: ErrorCode
    message: ErrorMessage


class AlterClientQuotasResponse(TypedDict):
    entries: Annotated[list[AlterQuotaResult], Len(0, MAX_QUOTA_ENTRIES)]


ALTER_CLIENT_QUOTAS = define_api(
    49, "alter_client_quotas", AlterClientQuotasRequest, AlterClientQuotasResponse
)

"""Handlers of describe_client_quotas (48) and alter_client_quotas (49)."""

from __future__ import annotations

from mq.broker.broker import Broker
from mq.broker.context import RequestContext
from mq.errors import InvalidRequestError, MQError
from mq.quotas import entities as q
from mq.quotas.entities import Entity
from mq.wire.apis_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterQuotaResult,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityComponent,
)


def _entity(components: list[EntityComponent]) -> Entity:
    try:
        return q.normalize([(c["entity_type"], c["entity_name"]) for c in components])
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None


def _components(ent: Entity) -> list[EntityComponent]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in ent]  # type: ignore[typeddict-item]


async def describe_client_quotas(
    broker: Broker, ctx: RequestContext, body: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    components = [(c["entity_type"], c["match_type"], c["match"]) for c in body["components"]]
    if len({c[0] for c in components}) != len(components):
        raise InvalidRequestError("a describe filter names an entity type twice")
    found = broker.client_quotas.describe(components, body["strict"])
    return {
        "entries": [
            {"entity": _components(ent), "values": {k: int(v) for k, v in values.items()}}
            for ent, values in found
        ]
    }


async def alter_client_quotas(
    broker: Broker, ctx: RequestContext, body: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    results: list[AlterQuotaResult] = []
    for entry in body["entries"]:
        result: AlterQuotaResult = {"entity": entry["entity"], "error": 0, "message": None}
        try:
            ent = _entity(entry["entity"])
            ops: list[tuple[str, float | None]] = []
            for op in entry["ops"]:
                if not op["remove"] and op["value"] is None:
                    raise InvalidRequestError(f"{op['key']}: a value, or remove")
                ops.append((op["key"], None if op["remove"] else float(op["value"] or 0)))
            await broker.client_quotas.alter(ent, ops, validate_only=body["validate_only"])
        except MQError as exc:
            result["error"] = exc.code
            result["message"] = exc.message
        results.append(result)
    return {"entries": results}

"""Client quotas in the admin client: describe, set and remove (Kafka's
DescribeClientQuotas / AlterClientQuotas).

::

    async with Admin(bootstrap) as admin:
        await admin.alter_client_quotas(QuotaEntity(client_id="batch"),
                                        {"producer_byte_rate": 1_048_576})
        print(await admin.describe_client_quotas())

An entity names a user, a client id or both, each either by name or as the
default (every user / client id without a quota of its own). The broker
applies the most specific entity's value of each quota (KIP-257's order).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mq.client.client import Client
from mq.errors import InvalidRequestError, error_for_code
from mq.wire.apis_quotas import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS

QUOTA_KEYS: Final = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


@dataclass(frozen=True)
class QuotaEntity:
    """Who a quota is for: ``user`` and/or ``client_id`` by name, or their defaults."""

    user: str | None = None
    client_id: str | None = None
    default_user: bool = False
    default_client_id: bool = False

    def __post_init__(self) -> None:
        if self.user is not None and self.default_user:
            raise ValueError("a quota entity names a user or the default user, not both")
        if self.client_id is not None and self.default_client_id:
            raise ValueError("a quota entity names a client id or the default one, not both")
        if not self.components():
            raise ValueError("a quota entity names a user, a client id, or a default")

    def components(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.user is not None or self.default_user:
            out.append({"entity_type": "user", "entity_name": self.user})
        if self.client_id is not None or self.default_client_id:
            out.append({"entity_type": "client-id", "entity_name": self.client_id})
        return out

    @classmethod
    def from_components(cls, components: Iterable[Mapping[str, Any]]) -> QuotaEntity:
        kw: dict[str, Any] = {}
        for c in components:
            if c["entity_type"] == "user":
                kw["user" if c["entity_name"] is not None else "default_user"] = (
                    c["entity_name"] if c["entity_name"] is not None else True
                )
            else:
                kw["client_id" if c["entity_name"] is not None else "default_client_id"] = (
                    c["entity_name"] if c["entity_name"] is not None else True
                )
        return cls(**kw)

    def __str__(self) -> str:
        parts = []
        if self.user is not None or self.default_user:
            parts.append(f"user={'<default>' if self.default_user else self.user}")
        if self.client_id is not None or self.default_client_id:
            parts.append(f"client-id={'<default>' if self.default_client_id else self.client_id}")
        return ",".join(parts)


@dataclass(frozen=True)
class ClientQuota:
    entity: QuotaEntity
    values: dict[str, int] = field(default_factory=dict)


class QuotaAdmin:
    """The quota methods of :class:`~mq.client.admin.Admin`."""

    _client: Client

    async def describe_client_quotas(
        self, entity: QuotaEntity | None = None, *, strict: bool = False
    ) -> list[ClientQuota]:
        """Every entity with quotas (``entity``: only those with its parts, each matched
        by name or as the default; ``strict``: and no other parts)."""
        components = []
        if entity is not None:
            for c in entity.components():
                name = c["entity_name"]
                components.append(
                    {
                        "entity_type": c["entity_type"],
                        "match_type": 1 if name is None else 0,
                        "match": name,
                    }
                )
        response = await self._client.call_any(
            DESCRIBE_CLIENT_QUOTAS, {"components": components, "strict": strict}
        )
        return [
            ClientQuota(QuotaEntity.from_components(e["entity"]), dict(e["values"]))
            for e in response["entries"]
        ]

    async def alter_client_quotas(
        self,
        entity: QuotaEntity,
        values: Mapping[str, int] | None = None,
        *,
        remove: Iterable[str] = (),
        validate_only: bool = False,
    ) -> None:
        """Set some quota values of ``entity`` and remove others (they fall back to less
        specific entities'); applied on every broker within a second."""
        ops: list[dict[str, Any]] = [
            {"key": k, "value": int(v), "remove": False} for k, v in (values or {}).items()
        ]
        ops += [{"key": k, "value": None, "remove": True} for k in remove]
        if not ops:
            raise InvalidRequestError("nothing to change: give values to set or keys to remove")
        body = {
            "entries": [{"entity": entity.components(), "ops": ops}],
            "validate_only": validate_only,
        }
        response = await self._client.call_any(ALTER_CLIENT_QUOTAS, body)
        for result in response["entries"]:
            if result["error"]:
                raise error_for_code(result["error"])(result["message"])

"""Quota entities, their store keys, and which entity's quota applies to a client (KIP-257).

An entity names a user, a client id, or both; either part may be the
*default* (``None`` here, ``<default>`` on the command line and in store
keys), meaning every user or client id without a quota of its own. A quota
configuration maps entities to values of :data:`QUOTA_KEYS`.

Each quota key is resolved on its own, from the most specific entity to
the least (Kafka's order)::

    user + client id, user + default client, user,
    default user + client id, default user + default client, default user,
    client id, default client

and the match says which clients share one bucket: a quota set for a user
(alone) is shared by all its client ids; one set for (user, client id), or
for a default that stands for either, is that pair's own. The bucket key is
``(user or None, client id or None)``: None where the matched entity has no
such part (the bucket is shared across it).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final
from urllib.parse import quote, unquote

USER: Final = "user"
CLIENT_ID: Final = "client-id"
ENTITY_TYPES: Final = (USER, CLIENT_ID)
DEFAULT_NAME: Final = "<default>"
"""How the default entity is written in store keys and on the command line (a real
name is percent-encoded there, so it never reads as this)."""

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
QUOTA_KEYS: Final = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
"""Bytes per second produced, bytes per second fetched, and the share (percent) of
the broker's event loop its requests' handlers may hold, per window."""
MAX_QUOTA_VALUE: Final = 2**53
"""Values are integers below this (exact as a float; far above any real rate)."""
MAX_REQUEST_PERCENTAGE: Final = 100
"""One event loop per broker: a principal cannot be given more than all of it."""

STORE_PREFIX: Final = "/quotas/"

Entity = tuple[tuple[str, str | None], ...]
"""((type, name or None for the default), ...): user before client id, each at most once."""
BucketKey = tuple[str | None, str | None]
"""(user, client id) a bucket is kept for; None where the quota is shared across that part."""


def entity(user: str | bool | None = False, client_id: str | bool | None = False) -> Entity:
    """An entity from its parts: a name, None for the default, False for no such part."""
    parts: list[tuple[str, str | None]] = []
    if user is not False:
        parts.append((USER, None if user is None or user is True else str(user)))
    if client_id is not False:
        parts.append(
            (CLIENT_ID, None if client_id is None or client_id is True else str(client_id))
        )
    if not parts:
        raise ValueError("a quota entity names a user, a client id, or both")
    return tuple(parts)


def normalize(parts: list[tuple[str, str | None]]) -> Entity:
    """Parts in any order as an :data:`Entity`; ValueError for unknown or repeated types."""
    seen: dict[str, str | None] = {}
    for kind, name in parts:
        if kind not in ENTITY_TYPES:
            raise ValueError(f"unknown quota entity type {kind!r} (expected user or client-id)")
        if kind in seen:
            raise ValueError(f"quota entity names {kind} twice")
        seen[kind] = name
    if not seen:
        raise ValueError("a quota entity names a user, a client id, or both")
    return tuple((kind, seen[kind]) for kind in ENTITY_TYPES if kind in seen)


def describe(ent: Entity) -> str:
    """``user=alice,client-id=<default>`` (for messages and the CLI)."""
    return ",".join(f"{kind}={DEFAULT_NAME if name is None else name}" for kind, name in ent)


def store_key(ent: Entity) -> str:
    """The metadata store key of an entity's quotas."""
    return STORE_PREFIX + "/".join(
        f"{kind}/{DEFAULT_NAME if name is None else quote(name, safe='')}" for kind, name in ent
    )


def entity_of_key(key: str) -> Entity:
    """The inverse of :func:`store_key`; ValueError for a key that is not one."""
    if not key.startswith(STORE_PREFIX):
        raise ValueError(f"{key!r} is not a quota key")
    words = key[len(STORE_PREFIX) :].split("/")
    if len(words) % 2 or not words:
        raise ValueError(f"{key!r} is not a quota key")
    parts = [
        (words[i], None if words[i + 1] == DEFAULT_NAME else unquote(words[i + 1]))
        for i in range(0, len(words), 2)
    ]
    return normalize(parts)


def check_value(key: str, value: float) -> None:
    """ValueError for a quota key or value the broker cannot enforce."""
    if key not in QUOTA_KEYS:
        raise ValueError(f"unknown quota {key!r} (expected one of {', '.join(QUOTA_KEYS)})")
    if not 0 < value < MAX_QUOTA_VALUE:
        raise ValueError(f"{key} must be positive and below {MAX_QUOTA_VALUE}, got {value}")
    if key == REQUEST_PERCENTAGE and value > MAX_REQUEST_PERCENTAGE:
        raise ValueError(f"{key} is at most {MAX_REQUEST_PERCENTAGE} (one event loop)")


def candidates(user: str, client_id: str) -> list[tuple[Entity, BucketKey]]:
    """The entities to look a client's quota up in, most specific first, each with
    the bucket it means (see the module docstring)."""
    return [
        (((USER, user), (CLIENT_ID, client_id)), (user, client_id)),
        (((USER, user), (CLIENT_ID, None)), (user, client_id)),
        (((USER, user),), (user, None)),
        (((USER, None), (CLIENT_ID, client_id)), (user, client_id)),
        (((USER, None), (CLIENT_ID, None)), (user, client_id)),
        (((USER, None),), (user, None)),
        (((CLIENT_ID, client_id),), (None, client_id)),
        (((CLIENT_ID, None),), (None, client_id)),
    ]


def resolve(
    quotas: Mapping[Entity, Mapping[str, float]], user: str, client_id: str, key: str
) -> tuple[BucketKey, float] | None:
    """The bucket and quota of ``key`` for a client, or None when no entity sets it."""
    for ent, bucket in candidates(user, client_id):
        values = quotas.get(ent)
        if values is not None:
            value = values.get(key)
            if value is not None:
                return bucket, value
    return None


def user_of(principal: str) -> str:
    """The user name of a principal (``User:alice`` → ``alice``; ``User:ANONYMOUS`` →
    ``ANONYMOUS``, as Kafka names unauthenticated clients in quotas)."""
    kind, sep, name = principal.partition(":")
    return name if sep and kind == "User" else principal


def matches(ent: Entity, components: Sequence[tuple[str, int, str | None]], strict: bool) -> bool:
    """Whether ``ent`` passes a describe filter (Kafka's DescribeClientQuotas): each
    component is (type, match, name) with match 0 = this name, 1 = the default,
    2 = any; ``strict``: the entity has no other parts."""
    parts = dict(ent)
    for kind, how, name in components:
        if kind not in parts:
            return False
        have = parts[kind]
        if how == 0 and have != name:
            return False
        if how == 1 and have is not None:
            return False
    return not strict or len(parts) == len({c[0] for c in components})

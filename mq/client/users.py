"""SCRAM users through the admin client (APIs 50 and 51, :mod:`mq.wire.apis_security`).

The client turns a password into the credential the broker stores (a random salt,
StoredKey, ServerKey, the iteration count; RFC 5802) with ``scramp``, so the password
never leaves this process. Used by :class:`mq.client.admin.Admin` (``add_user``,
``delete_user``, ``list_users``) and ``mq user``.

Not thread-safe: one event loop.
"""

from __future__ import annotations

from typing import Any

from scramp import ScramMechanism

from mq.client.client import Client
from mq.errors import error_for_code
from mq.wire.apis_security import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS

DEFAULT_ITERATIONS = 8192
"""PBKDF2 rounds of a new credential: twice RFC 7677's minimum (4096), ~5 ms per login
for the client."""


def scram_upsertion(
    user: str,
    password: str,
    mechanism: str = "SCRAM-SHA-256",
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> dict[str, Any]:
    """The upsertion entry of alter_user_scram_credentials for ``password``."""
    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt
    )
    return {
        "user": user,
        "mechanism": mechanism,
        "iterations": count,
        "salt": salt,
        "stored_key": stored_key,
        "server_key": server_key,
    }


async def alter(
    client: Client, upsertions: list[dict[str, Any]], deletions: list[dict[str, Any]]
) -> None:
    """Apply the changes; the first failed entry's error is raised (after all were tried)."""
    body = {"upsertions": upsertions, "deletions": deletions}
    response = await client.call_any(ALTER_USER_SCRAM_CREDENTIALS, body)
    for result in response["results"]:
        if result["error"]:
            raise error_for_code(result["error"])(result["message"])


async def describe(client: Client, users: list[str] | None = None) -> dict[str, dict[str, int]]:
    """User → mechanism → iterations (the users named, or all)."""
    response = await client.call_any(DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": users})
    found: dict[str, dict[str, int]] = {}
    for result in response["results"]:
        if result["error"]:
            raise error_for_code(result["error"])(result["message"])
        found[result["user"]] = {c["mechanism"]: c["iterations"] for c in result["credentials"]}
    return found

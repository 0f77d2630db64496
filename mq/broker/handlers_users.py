"""Handlers of the SCRAM user APIs (describe 50, alter 51): the metadata store's
``/users/`` through :mod:`mq.replication.scram_store`.

Any broker serves them (the store is shared; every broker's cache follows it).
Who may call them is the gate's business (``CLUSTER`` ``ALTER`` / ``DESCRIBE``
once ACLs exist), not these handlers'.
"""

from __future__ import annotations

from mq.broker.broker import Broker
from mq.broker.context import RequestContext
from mq.errors import InvalidRequestError, MQError, ResourceNotFoundError
from mq.replication.scram_store import (
    ScramCredential,
    check_user_name,
    delete_credential,
    put_credential,
    read_users,
)
from mq.wire.apis_security import (
    AlteredUser,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribedUser,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)


async def describe(
    broker: Broker, ctx: RequestContext, body: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    """The users (all, or those named) with their mechanisms and iterations (no keys).

    Read from the store, not the cache: a user just added through another broker is
    listed at once."""
    users, _ = await read_users(broker.store)
    names = sorted(users) if body["users"] is None else list(dict.fromkeys(body["users"]))
    results: list[DescribedUser] = []
    for name in names:
        found = users.get(name)
        if not found:
            error = ResourceNotFoundError(f"user {name!r} has no SCRAM credentials")
            results.append(
                {"user": name, "error": error.code, "message": error.message, "credentials": []}
            )
            continue
        results.append(
            {
                "user": name,
                "error": 0,
                "message": None,
                "credentials": [
                    {"mechanism": mech, "iterations": c.iterations}
                    for mech, c in sorted(found.items())
                ],
            }
        )
    return {"results": results}


async def alter(
    broker: Broker, ctx: RequestContext, body: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    """Apply each upsertion and deletion (each on its own: one bad entry fails alone)."""
    results: list[AlteredUser] = []
    for upsertion in body["upsertions"]:
        name = upsertion["user"]
        try:
            credential = ScramCredential(
                upsertion["salt"],
                upsertion["stored_key"],
                upsertion["server_key"],
                upsertion["iterations"],
            )
            if len(credential.salt) < 12 or len(credential.stored_key) < 32:
                raise InvalidRequestError(
                    f"user {name!r}: a credential needs a salt of 12+ bytes and 32+ byte keys"
                )
            await put_credential(broker.store, name, upsertion["mechanism"], credential)
        except MQError as exc:
            results.append({"user": name, "error": exc.code, "message": exc.message})
            continue
        results.append({"user": name, "error": 0, "message": None})
    for deletion in body["deletions"]:
        name = deletion["user"]
        try:
            check_user_name(name)
            if not await delete_credential(broker.store, name, deletion["mechanism"]):
                what = deletion["mechanism"] or "any SCRAM mechanism"
                raise ResourceNotFoundError(f"user {name!r} has no credential for {what}")
        except MQError as exc:
            results.append({"user": name, "error": exc.code, "message": exc.message})
            continue
        results.append({"user": name, "error": 0, "message": None})
    return {"results": results}

"""The authorization matrix's "wrong password" row, end to end (issue 19).

:mod:`test_authorization_matrix` sets each case's principal on the request
context, as authentication leaves it. A wrong password never gets a principal:
this test opens a real connection to a ``sasl_plaintext`` listener for every API
of the matrix, logs in as alice with a wrong password (SCRAM-SHA-256, by hand
with ``scramp``) and pipelines the API's request right behind the failing
client-final message, so that it is already in the broker's buffer when the
authentication fails. The login must fail and the request must never succeed (the
connection is closed unanswered, or the request refused), and nothing it asked for
may have happened. Both alice and the anonymous user hold the ACLs each API needs:
only authentication stands in the way.
The same holds for a request sent without any authentication.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inprocess_broker import running_broker
from scramp import ScramClient
from test_authorization_matrix import ALICE, ROOT, SPECS, Spec, _call, _refused, _setup

from mq.acl.index import AclIndex
from mq.acl.model import AclBinding, Permission
from mq.broker.context import RequestContext
from mq.broker.server import Server
from mq.client import users
from mq.client.connection import Connection
from mq.errors import MQError, NetworkError, SaslAuthenticationFailedError
from mq.wire import apis_core
from mq.wire.apis_security import ALTER_USER_SCRAM_CREDENTIALS

MECHANISM = "SCRAM-SHA-256"
ITERATIONS = 4096
ANONYMOUS = "User:ANONYMOUS"
REPLY_TIMEOUT_S = 10.0
"""Bound on each answer (or the close): the failure delay is short here."""
FREE = {apis_core.API_VERSIONS.key, apis_core.AUTHENTICATE.key}
"""Served before authentication (as Kafka's ApiVersions and SaslHandshake/Authenticate)."""


async def _after_a_wrong_password(server: Server, spec: Spec) -> tuple[bool, str]:
    """(whether the request succeeded, what happened) with the request pipelined behind a
    failing login."""
    host, port = server.bound["SASL_PLAINTEXT"]
    conn = await Connection.open(host, port)
    try:
        scram = ScramClient([MECHANISM], "alice", "not-her-password")
        first = {"mechanism": MECHANISM, "auth_bytes": scram.get_client_first().encode()}
        reply = await conn.call(apis_core.AUTHENTICATE, first, timeout_s=REPLY_TIMEOUT_S)
        scram.set_server_first(reply["auth_bytes"].decode())
        final = {"mechanism": MECHANISM, "auth_bytes": scram.get_client_final().encode()}
        login = await conn.request(apis_core.AUTHENTICATE, final, timeout_s=REPLY_TIMEOUT_S)
        attempt = await conn.request(spec.api, spec.body(server), timeout_s=REPLY_TIMEOUT_S)
        login_result, result = await asyncio.gather(login, attempt, return_exceptions=True)
    finally:
        conn.close()
    # the failure's answer, or none: the request behind it, refused as one before
    # authentication, may have closed the connection first
    assert isinstance(login_result, SaslAuthenticationFailedError | NetworkError), login_result
    return _outcome(spec, result)


async def _without_logging_in(server: Server, spec: Spec) -> tuple[bool, str]:
    host, port = server.bound["SASL_PLAINTEXT"]
    conn = await Connection.open(host, port)
    try:
        attempt = await conn.request(spec.api, spec.body(server), timeout_s=REPLY_TIMEOUT_S)
        (result,) = await asyncio.gather(attempt, return_exceptions=True)
    finally:
        conn.close()
    return _outcome(spec, result)


def _grants(spec: Spec) -> list[AclBinding]:
    return [
        AclBinding(who, Permission.ALLOW, op, kind, name)
        for op, kind, name in spec.needs
        for who in (ALICE, ANONYMOUS)
    ]


def _outcome(spec: Spec, result: Any) -> tuple[bool, str]:
    if isinstance(result, MQError | OSError | TimeoutError):
        return False, f"{type(result).__name__}: {result}"
    if isinstance(result, BaseException):
        raise result
    return not _refused(spec, 0, result), f"answered {result!r:.300}"


async def test_no_api_after_a_wrong_password_or_without_a_login(tmp_path: Path) -> None:
    settings: dict[str, Any] = {
        "listeners": ("plaintext://127.0.0.1:0", "sasl_plaintext://127.0.0.1:0"),
        "authorizer": "acl",
        "super_users": ("root",),
        "offsets_partitions": 1,
        "sasl_failed_authentication_delay_ms": 20,
    }
    async with running_broker(tmp_path / "data", **settings) as running:
        server = running.server
        await _setup(server)
        root = RequestContext(0, "127.0.0.1:1", "setup", ROOT)
        alice = users.scram_upsertion("alice", "alice-secret", MECHANISM, ITERATIONS)
        body = {"upsertions": [alice]}
        code, response = await _call(server, root, ALTER_USER_SCRAM_CREDENTIALS, body)
        assert code == 0
        assert [r["error"] for r in response["results"]] == [0], response
        topics_before = set(server.broker.view.topics)
        successes: list[str] = []
        tried = 0
        for spec in SPECS:
            if spec.api.key in FREE:
                continue
            # alice and the anonymous user may do what the API needs: only the failed
            # (or missing) login stands in the way
            server.authorizer.cache.index = AclIndex(_grants(spec))
            for how in (_after_a_wrong_password, _without_logging_in):
                tried += 1
                succeeded, what = await how(server, spec)
                if succeeded:
                    successes.append(f"{spec.api.name} {how.__name__}: {what}")
        server.authorizer.cache.index = AclIndex()
        assert tried >= 2 * 40, "the matrix's APIs were all tried"
        assert successes == []
        assert set(server.broker.view.topics) == topics_before, "no topic made or deleted"

"""SASL SCRAM and PLAIN on the broker (issue 19): real sockets, a broker in the test's
loop with a plaintext listener (for the admin) and SASL listeners.

Users are added through the user APIs (50/51) and found by every login; a wrong
password and an unknown user get one and the same error after the failure delay;
PLAIN is refused without TLS; nothing but api_versions and authenticate is served
before authentication, and the connection is then closed.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import Running, running_broker
from tls_certs import Pki, make_pki

import mq
from mq.broker import sasl
from mq.broker.connection import Connection as BrokerConnection
from mq.client.connection import Connection
from mq.client.security import Security, security_from
from mq.errors import (
    IllegalSaslStateError,
    NetworkError,
    ResourceNotFoundError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from mq.wire.apis_core import AUTHENTICATE, METADATA

DELAY_MS = 200


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def sasl_broker(tmp_path: Path, pki: Pki) -> AsyncIterator[Running]:
    settings: dict[str, Any] = {
        "listeners": (
            "plaintext://127.0.0.1:0",
            "sasl_plaintext://127.0.0.1:0",
            "sasl_ssl://127.0.0.1:0",
        ),
        "tls_cert": str(pki.server.cert),
        "tls_key": str(pki.server.key),
        "sasl_failed_authentication_delay_ms": DELAY_MS,
        # authentication only: what each user may do is test_authorization_matrix's
        "authorizer": "none",
    }
    async with running_broker(tmp_path / "data", **settings) as running:
        async with mq.Admin(running.server_address("PLAINTEXT")) as admin:
            await admin.add_user("alice", "alice-secret")
            await admin.add_user("bob", "bob-secret", mechanism="SCRAM-SHA-512")
        yield running


async def _open(running: Running, listener: str, **options: Any) -> Connection:
    host, port = running.server.bound[listener]
    return await Connection.open(host, port, security=security_from(options))


def _ssl(pki: Pki) -> dict[str, Any]:
    return {"security_protocol": "SASL_SSL", "ssl_cafile": str(pki.ca)}


async def test_scram_logins_over_both_listeners(sasl_broker: Running, pki: Pki) -> None:
    for listener, extra in (
        ("SASL_PLAINTEXT", {"security_protocol": "SASL_PLAINTEXT"}),
        ("SASL_SSL", _ssl(pki)),
    ):
        for user, password, mechanism in (
            ("alice", "alice-secret", "SCRAM-SHA-256"),
            ("bob", "bob-secret", "SCRAM-SHA-512"),
        ):
            conn = await _open(
                sasl_broker,
                listener,
                sasl_mechanism=mechanism,
                sasl_plain_username=user,
                sasl_plain_password=password,
                **extra,
            )
            try:
                await conn.call(METADATA, {"topics": []})
                principals = {
                    c.ctx.principal for c in sasl_broker.server.connections if c.ctx.authenticated
                }
                assert f"User:{user}" in principals
            finally:
                conn.close()


async def test_clients_produce_and_consume_over_sasl_ssl(sasl_broker: Running, pki: Pki) -> None:
    options = {**_ssl(pki), "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
    bootstrap = sasl_broker.server_address("SASL_SSL")
    async with mq.Producer(bootstrap, **options) as producer:
        await producer.send_and_wait("secured", b"hello")
    async with mq.Consumer(
        "secured", bootstrap=bootstrap, auto_offset_reset="earliest", **options
    ) as consumer:
        batches = await consumer.getmany(timeout_ms=10_000)
    assert [r.value for rs in batches.values() for r in rs] == [b"hello"]
    await asyncio.to_thread(_sync_send, bootstrap, options)  # the broker runs in this loop


def _sync_send(bootstrap: str, options: dict[str, Any]) -> None:
    with mq.SyncProducer(bootstrap, **options) as producer:
        producer.send("secured", b"sync").result(30)


async def test_plain_only_over_tls(sasl_broker: Running, pki: Pki) -> None:
    plain = {
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    conn = await _open(sasl_broker, "SASL_SSL", **_ssl(pki), **plain)
    conn.close()
    # the client refuses to send a password in clear...
    with pytest.raises(ValueError, match="PLAIN"):
        security_from({"security_protocol": "SASL_PLAINTEXT", **plain})
    # ...and so does the broker, whatever the client
    conn = await _open(sasl_broker, "SASL_PLAINTEXT")
    with pytest.raises(UnsupportedSaslMechanismError, match="TLS"):
        await conn.call(
            AUTHENTICATE, {"mechanism": "PLAIN", "auth_bytes": b"\0alice\0alice-secret"}
        )
    await asyncio.wait_for(conn.wait_closed(), 10)


async def _failure(
    running: Running, pki: Pki, user: str, password: str, mechanism: str
) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(SaslAuthenticationFailedError) as caught:
        await _open(
            running,
            "SASL_SSL",
            **_ssl(pki),
            sasl_mechanism=mechanism,
            sasl_plain_username=user,
            sasl_plain_password=password,
        )
    return caught.value.message, time.monotonic() - started


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
async def test_wrong_password_and_unknown_user_look_the_same(
    sasl_broker: Running, pki: Pki, mechanism: str
) -> None:
    before = sasl.stats.failed
    wrong, wrong_s = await _failure(sasl_broker, pki, "alice", "not-her-password", mechanism)
    unknown, unknown_s = await _failure(sasl_broker, pki, "mallory", "whatever", mechanism)
    assert wrong == unknown
    assert "invalid user name or password" in wrong
    assert min(wrong_s, unknown_s) >= DELAY_MS / 1000  # the failure delay was applied
    assert sasl.stats.failed - before == 2


async def test_an_unknown_users_salt_is_stable(sasl_broker: Running) -> None:
    """The server-first message of an unknown user changes only its nonce between tries:
    comparing two tries does not tell a real user from a made-up one."""

    async def salt_of(user: str) -> str:
        conn = await _open(sasl_broker, "SASL_PLAINTEXT")
        try:
            first = f"n,,n={user},r=abcdefghijklmnop".encode()
            reply = await conn.call(
                AUTHENTICATE, {"mechanism": "SCRAM-SHA-256", "auth_bytes": first}
            )
        finally:
            conn.close()
        fields = dict(f.split("=", 1) for f in reply["auth_bytes"].decode().split(","))
        return fields["s"] + "/" + fields["i"]

    assert await salt_of("mallory") == await salt_of("mallory")
    assert await salt_of("mallory") != await salt_of("eve")


async def test_nothing_but_authentication_before_it(sasl_broker: Running) -> None:
    conn = await _open(sasl_broker, "SASL_PLAINTEXT")
    with pytest.raises(IllegalSaslStateError, match="before authentication"):
        await conn.call(METADATA, {"topics": []})
    await asyncio.wait_for(conn.wait_closed(), 10)
    # the plaintext listener of the same broker is not affected
    host, port = sasl_broker.server.bound["PLAINTEXT"]
    conn = await Connection.open(host, port)
    await conn.call(METADATA, {"topics": []})
    conn.close()


async def test_authenticate_on_a_plaintext_listener_is_refused(sasl_broker: Running) -> None:
    host, port = sasl_broker.server.bound["PLAINTEXT"]
    conn = await Connection.open(host, port)
    try:
        with pytest.raises(IllegalSaslStateError, match="does not use SASL"):
            await conn.call(
                AUTHENTICATE, {"mechanism": "SCRAM-SHA-256", "auth_bytes": b"n,,n=a,r=b"}
            )
    finally:
        conn.close()


async def test_an_unauthenticated_connection_is_closed_after_the_timeout(tmp_path: Path) -> None:
    settings = {
        "listeners": ("sasl_plaintext://127.0.0.1:0",),
        "sasl_authenticate_timeout_ms": 500,
        "authorizer": "none",
    }
    async with running_broker(tmp_path / "data", **settings) as running:
        conn = await _open(running, "SASL_PLAINTEXT")
        await asyncio.wait_for(conn.wait_closed(), 10)


async def test_users_are_listed_and_deleted(sasl_broker: Running, pki: Pki) -> None:
    async with mq.Admin(sasl_broker.server_address("PLAINTEXT")) as admin:
        users = await admin.list_users()
        assert users == {"alice": {"SCRAM-SHA-256": 8192}, "bob": {"SCRAM-SHA-512": 8192}}
        await admin.delete_user("bob")
        with pytest.raises(ResourceNotFoundError):
            await admin.delete_user("bob")
        assert set(await admin.list_users()) == {"alice"}
    # bob's credential is gone from the broker's cache too
    deadline = time.monotonic() + 10
    while sasl_broker.broker.scram_credentials.get("bob", "SCRAM-SHA-512") is not None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    message, _ = await _failure(sasl_broker, pki, "bob", "bob-secret", "SCRAM-SHA-512")
    assert "invalid" in message


async def test_a_password_change_applies_to_the_next_login(sasl_broker: Running, pki: Pki) -> None:
    async with mq.Admin(sasl_broker.server_address("PLAINTEXT")) as admin:
        await admin.add_user("alice", "new-secret")
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = await _open(
                sasl_broker,
                "SASL_SSL",
                **_ssl(pki),
                sasl_plain_username="alice",
                sasl_plain_password="new-secret",
            )
            break
        except SaslAuthenticationFailedError:
            assert time.monotonic() < deadline, "the new password never worked"
    conn.close()
    await _failure(sasl_broker, pki, "alice", "alice-secret", "SCRAM-SHA-256")


def test_security_options_are_checked() -> None:
    with pytest.raises(ValueError, match="security_protocol"):
        security_from({"security_protocol": "TLS"})
    with pytest.raises(ValueError, match="sasl_plain_username"):
        security_from({"security_protocol": "SASL_PLAINTEXT"})
    assert security_from({}) is None
    secured = security_from(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_plain_username": "a",
            "sasl_plain_password": "pw-1",
        }
    )
    assert isinstance(secured, Security)
    assert "pw-1" not in repr(secured)


async def test_a_network_error_is_not_an_authentication_error(sasl_broker: Running) -> None:
    with pytest.raises(NetworkError):
        await Connection.open("127.0.0.1", 1, security=None, connect_timeout_s=2)


async def test_a_queue_client_over_sasl_ssl(sasl_broker: Running, pki: Pki) -> None:
    """The queue client's own admin client and producer get the security keywords too."""
    options = {**_ssl(pki), "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
    async with mq.QueueClient(sasl_broker.server_address("SASL_SSL"), **options) as queue:
        await queue.create_queue("jobs")
        await queue.send("jobs", b"job-1")
        messages = await queue.receive("jobs", max_messages=1, wait=10)
        assert [m.body for m in messages] == [b"job-1"]
        await queue.ack(*messages)
        listeners = {c.ctx.listener for c in sasl_broker.server.connections if c.ctx.authenticated}
    assert listeners == {"SASL_SSL"}


def _sync_refused(bootstrap: str, options: dict[str, Any]) -> None:
    with pytest.raises(SaslAuthenticationFailedError):
        mq.SyncAdmin(bootstrap, **options)


async def test_a_refused_login_from_a_sync_client_leaks_no_connection(
    sasl_broker: Running, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wrapper's loop is closed when its client fails to start: the TLS connection the
    refused login used must be closed first, or closing the loop fails (EBUSY) and the
    transport is reported unclosed. The broker here is slow to close its side (as a
    loaded one is), so the client cannot count on the broker's answers to its close."""
    finish_close = BrokerConnection._finish_close

    def slowly(self: BrokerConnection) -> None:
        time.sleep(0.5)  # the whole broker stalls: the refusal is sent, nothing more
        finish_close(self)

    monkeypatch.setattr(BrokerConnection, "_finish_close", slowly)
    options = {**_ssl(pki), "sasl_plain_username": "alice", "sasl_plain_password": "wrong"}
    bootstrap = sasl_broker.server_address("SASL_SSL")
    for _ in range(5):
        await asyncio.to_thread(_sync_refused, bootstrap, options)
    gc.collect()  # an unclosed transport is reported when it is collected

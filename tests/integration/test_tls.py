"""TLS listeners and mutual TLS (issue 19): real sockets, a broker in the test's loop,
certificates made by the test (:mod:`tls_certs`).

A TLS client verifies the broker's certificate (an expired one or one for another
host is refused); with ``tls_client_ca`` the broker requires a client certificate
and the principal is ``User:<CN>``; a TLS client on a plaintext port and a plaintext
client on a TLS port fail at once, saying so.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import Running, running_broker
from tls_certs import Pki, make_pki

import mq
from mq.broker.config import BrokerConfig
from mq.client.connection import Connection
from mq.client.security import Security, tls_context
from mq.errors import InvalidConfigError, NetworkError, TlsMismatchError
from mq.wire.apis_core import API_VERSIONS, METADATA

FAIL_FAST_S = 5.0
"""A mismatch must fail well before the 10 s connect timeout (a bound, not a measure)."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("alice", "bob"))


def _tls_settings(pki: Pki, *, cert: Any = None, client_ca: bool = False) -> dict[str, Any]:
    pair = cert or pki.server
    return {
        "listeners": ("plaintext://127.0.0.1:0", "ssl://127.0.0.1:0"),
        "tls_cert": str(pair.cert),
        "tls_key": str(pair.key),
        "tls_client_ca": str(pki.ca) if client_ca else None,
        # authentication only: what each principal may do is test_authorization_matrix's
        "authorizer": "none",
    }


@pytest.fixture
async def tls_broker(tmp_path: Path, pki: Pki) -> AsyncIterator[Running]:
    async with running_broker(tmp_path / "data", **_tls_settings(pki)) as running:
        yield running


def _address(running: Running, name: str) -> str:
    host, port = running.server.bound[name]
    return f"{host}:{port}"


async def test_a_tls_client_produces_and_consumes(tls_broker: Running, pki: Pki) -> None:
    bootstrap = _address(tls_broker, "SSL")
    async with mq.Producer(bootstrap, security_protocol="SSL", ssl_cafile=str(pki.ca)) as producer:
        await producer.send_and_wait("t", b"over tls")
    async with mq.Consumer(
        "t",
        bootstrap=bootstrap,
        auto_offset_reset="earliest",
        security_protocol="SSL",
        ssl_cafile=str(pki.ca),
    ) as consumer:
        batches = await consumer.getmany(timeout_ms=10_000)
        listeners = {c.ctx.listener for c in tls_broker.server.connections}
    values = [r.value for records in batches.values() for r in records]
    assert values == [b"over tls"]
    assert listeners == {"SSL"}, "the consumer connected through the SSL listener only"


async def test_metadata_gives_the_address_of_the_listener_used(
    tls_broker: Running, pki: Pki
) -> None:
    security = Security("SSL", ssl_context=tls_context(str(pki.ca)))
    for name, used in (("SSL", security), ("PLAINTEXT", None)):
        conn = await _connect(_address(tls_broker, name), used)
        try:
            response = await conn.call(METADATA, {"topics": []})
        finally:
            conn.close()
        addresses = {(b["host"], b["port"]) for b in response["brokers"]}
        assert addresses == {tls_broker.server.bound[name]}, name


async def _connect(address: str, security: Security | None) -> Connection:
    host, port = address.rsplit(":", 1)
    return await Connection.open(host, int(port), security=security)


async def _connect_and_ask(address: str, security: Security) -> None:
    """Connect and send a request (with TLS 1.3 a refused client certificate shows only
    once the client reads: the broker's alert comes after the client's handshake)."""
    conn = await _connect(address, security)
    try:
        await conn.call(API_VERSIONS, {}, version=0)
    finally:
        conn.close()


async def test_a_tls_client_on_a_plaintext_port_fails_fast(tls_broker: Running, pki: Pki) -> None:
    security = Security("SSL", ssl_context=tls_context(str(pki.ca)))
    started = time.monotonic()
    with pytest.raises(TlsMismatchError, match="plaintext"):
        await _connect(_address(tls_broker, "PLAINTEXT"), security)
    assert time.monotonic() - started < FAIL_FAST_S


async def test_a_plaintext_client_on_a_tls_port_fails_fast(tls_broker: Running) -> None:
    started = time.monotonic()
    with pytest.raises(NetworkError, match="TLS") as caught:
        await _connect(_address(tls_broker, "SSL"), None)
    assert time.monotonic() - started < FAIL_FAST_S
    assert "security_protocol" in str(caught.value)
    # the broker goes on serving
    conn = await _connect(_address(tls_broker, "PLAINTEXT"), None)
    conn.close()


@pytest.mark.parametrize("which", ["expired", "wrong_host", "other_ca"])
async def test_a_bad_broker_certificate_is_refused(tmp_path: Path, pki: Pki, which: str) -> None:
    cert = {"expired": pki.expired, "wrong_host": pki.wrong_host, "other_ca": pki.server}[which]
    cafile = pki.other_ca if which == "other_ca" else pki.ca
    async with running_broker(tmp_path / "data", **_tls_settings(pki, cert=cert)) as running:
        security = Security("SSL", ssl_context=tls_context(str(cafile)))
        with pytest.raises(TlsMismatchError, match="certificate is refused"):
            await _connect(_address(running, "SSL"), security)


async def test_mutual_tls_names_the_principal_and_requires_a_certificate(
    tmp_path: Path, pki: Pki
) -> None:
    settings = _tls_settings(pki, client_ca=True)
    async with running_broker(tmp_path / "data", **settings) as running:
        address = _address(running, "SSL")
        alice = pki.clients["alice"]
        context = tls_context(str(pki.ca), str(alice.cert), str(alice.key))
        conn = await _connect(address, Security("SSL", ssl_context=context))
        try:
            mine = [c.ctx for c in running.server.connections if c.ctx.listener == "SSL"]
            assert [(c.principal, c.authenticated) for c in mine] == [("User:alice", True)]
        finally:
            conn.close()
        # no client certificate: the handshake (or the first request) is refused
        with pytest.raises(NetworkError):
            await _connect_and_ask(address, Security("SSL", ssl_context=tls_context(str(pki.ca))))
        # an expired client certificate: refused too
        expired = tls_context(str(pki.ca), str(pki.expired.cert), str(pki.expired.key))
        with pytest.raises(NetworkError):
            await _connect_and_ask(address, Security("SSL", ssl_context=expired))
        assert not [c for c in running.server.connections if c.ctx.listener == "SSL"]


async def test_principal_mapping_rules_apply(tmp_path: Path, pki: Pki) -> None:
    settings = _tls_settings(pki, client_ca=True)
    rules = ("RULE:^CN=(.*?),O=mq local$/$1-svc/U", "DEFAULT")
    async with running_broker(
        tmp_path / "data", ssl_principal_mapping_rules=rules, **settings
    ) as running:
        bob = pki.clients["bob"]
        context = tls_context(str(pki.ca), str(bob.cert), str(bob.key))
        conn = await _connect(_address(running, "SSL"), Security("SSL", ssl_context=context))
        try:
            mine = [c.ctx.principal for c in running.server.connections if c.ctx.listener == "SSL"]
            assert mine == ["User:BOB-SVC"]
        finally:
            conn.close()


def test_a_non_loopback_listener_needs_tls_and_authentication(pki: Pki) -> None:
    with pytest.raises(InvalidConfigError, match="--insecure"):
        BrokerConfig(host="0.0.0.0")
    with pytest.raises(InvalidConfigError, match="needs TLS and authentication"):
        BrokerConfig(
            listeners=("ssl://0.0.0.0:0",),
            tls_cert=str(pki.server.cert),
            tls_key=str(pki.server.key),
        )
    BrokerConfig(host="0.0.0.0", insecure=True)
    BrokerConfig(
        listeners=("sasl_ssl://0.0.0.0:0",),
        tls_cert=str(pki.server.cert),
        tls_key=str(pki.server.key),
    )
    BrokerConfig(
        listeners=("ssl://0.0.0.0:0",),
        tls_cert=str(pki.server.cert),
        tls_key=str(pki.server.key),
        tls_client_ca=str(pki.ca),
    )
    assert BrokerConfig().listeners == ()  # the embedded default: plaintext on 127.0.0.1


async def test_the_default_is_one_plaintext_listener_on_loopback(tmp_path: Path) -> None:
    async with running_broker(tmp_path / "data") as running:
        assert list(running.server.bound) == ["PLAINTEXT"]
        assert running.server.bound["PLAINTEXT"][0] == "127.0.0.1"
        async with mq.Admin(running.bootstrap) as admin:
            await admin.create_topic("plain", partitions=1)
        await asyncio.sleep(0)


async def test_tls_below_1_2_is_refused(tls_broker: Running, pki: Pki) -> None:
    old = tls_context(str(pki.ca))
    with warnings.catch_warnings():  # the ssl module deprecates what this test needs
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(TlsMismatchError):
        await _connect(_address(tls_broker, "SSL"), Security("SSL", ssl_context=old))


def test_serve_refuses_a_non_loopback_address_without_tls_saying_why(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mq_cli.main",
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "needs TLS and authentication" in done.stderr
    assert "--insecure" in done.stderr


async def test_a_refused_tls_connect_is_a_retriable_network_error(pki: Pki) -> None:
    """Regression: a connect refused (a broker restarting) once became a non-retriable
    TlsMismatchError, and a producer failed its records instead of retrying."""
    from mq.local_cluster import free_port

    security = Security("SSL", ssl_context=tls_context(str(pki.ca)))
    with pytest.raises(NetworkError) as caught:
        await _connect(f"127.0.0.1:{free_port()}", security)
    assert not isinstance(caught.value, TlsMismatchError)
    assert caught.value.retriable

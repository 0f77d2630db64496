"""The HTTP listener behind the broker's users and ACLs (issues 19 and 21): a real broker
with a SASL listener, ``authorizer = "acl"`` and ``--http-port 0``, asked over real
HTTP(S) on 127.0.0.1.

* anonymous: 401 with a Basic challenge on /metrics, /api/*, / and the console's files;
  the probes answer, and /readyz names no topic;
* a wrong password and an unknown user: one and the same 401, after the failure
  delay, both audited;
* a user allowed READ on topic ``a`` only: sees ``a`` alone in /api/topics, reads its
  records, gets 403 (the admin API's JSON shape, audited) on ``b``'s and on /metrics;
* a super user sees everything;
* ``http_tls = "on"``: HTTPS with the broker's certificate on 127.0.0.1;
* a real ``mq serve`` with ACLs on refuses anonymous, and the default
  ``mq serve --http-port 0`` (no security) stays open.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from broker_process import BrokerProcess
from inprocess_broker import Running, running_broker
from tls_certs import Pki, make_pki

import mq
from mq.acl.model import AclBinding, Operation, Permission, ResourceType
from mq.broker.acl_store import put_bindings
from mq.broker.audit import read_audit
from mq.replication.scram_store import MIN_ITERATIONS, make_credential, put_credential

DELAY_MS = 300
WAIT_S = 10.0
HTTP_TIMEOUT_S = 30.0
ROOT = ("root", "root-secret")
ALICE = ("alice", "alice-secret")
MECHANISM = "SCRAM-SHA-256"
SECURED_PATHS = ("/metrics", "/api/cluster", "/api/topics", "/api/topics/a", "/", "/console/app.js")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def _user(running: Running, name: str, password: str) -> None:
    """A SCRAM user straight in the store (as ``mq user add`` makes it), once the broker
    knows it."""
    credential = make_credential(MECHANISM, password, iterations=MIN_ITERATIONS)
    await put_credential(running.broker.store, name, MECHANISM, credential)
    deadline = time.monotonic() + WAIT_S
    while running.broker.scram_credentials.get(name, MECHANISM) is None:
        assert time.monotonic() < deadline, f"the broker did not learn user {name}"
        await asyncio.sleep(0.01)


def _sasl(running: Running) -> dict[str, Any]:
    return {
        "bootstrap": running.server_address("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": ROOT[0],
        "sasl_plain_password": ROOT[1],
    }


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Running]:
    async with running_broker(
        tmp_path / "data",
        listeners=("sasl_plaintext://127.0.0.1:0",),
        authorizer="acl",
        super_users=(ROOT[0],),
        # the admin API reads records and offsets as a broker, over the SASL listener
        inter_broker_sasl_username=ROOT[0],
        inter_broker_sasl_password=ROOT[1],
        inter_broker_sasl_mechanism=MECHANISM,
        http_port=0,
        sasl_failed_authentication_delay_ms=DELAY_MS,
        http_auth_failures_per_ip=1_000,  # the tests' own failures must not lock them out
    ) as running:
        await _user(running, *ROOT)
        await _user(running, *ALICE)
        read_a = AclBinding(
            f"User:{ALICE[0]}", Permission.ALLOW, Operation.READ, ResourceType.TOPIC, "a"
        )
        await put_bindings(running.broker.store, [read_a])
        cache = running.server.authorizer.cache
        assert await cache.wait_until(lambda: read_a in cache.index, WAIT_S)
        async with mq.Admin(**_sasl(running)) as admin:
            await admin.create_topic("a", 1, 1)
            await admin.create_topic("b", 1, 1)
        async with mq.Producer(acks="all", **_sasl(running)) as producer:
            await producer.send_and_wait("a", b"hello from a")
            await producer.send_and_wait("b", b"secret of b")
        yield running


def _url(running: Running, path: str) -> str:
    assert running.server.http is not None
    scheme = "https" if running.server.http.tls else "http"
    return f"{scheme}://127.0.0.1:{running.server.http.port}{path}"


async def _get(
    running: Running,
    path: str,
    auth: tuple[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[int, Any, dict[str, str]]:
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    headers = {}
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(_url(running, path), headers=headers, ssl=ssl_context or False) as response,
    ):
        is_json = response.content_type == "application/json"
        body = await response.json() if is_json else await response.read()
        return response.status, body, dict(response.headers)


async def test_anonymous_gets_a_basic_challenge_everywhere_but_the_probes(
    secured: Running,
) -> None:
    for path in SECURED_PATHS:
        status, body, headers = await _get(secured, path)
        assert status == 401, (path, body)
        assert headers["WWW-Authenticate"].startswith('Basic realm="mq"'), path
        assert body["error"] == "AuthenticationRequired"
    status, body, _ = await _get(secured, "/healthz")
    assert (status, body["status"]) == (200, "ok")
    status, body, _ = await _get(secured, "/readyz")
    assert body["status"] in ("ready", "not ready")
    assert not any("a-0" in reason or "b-0" in reason for reason in body["reasons"])


async def test_wrong_password_and_unknown_user_are_one_answer(secured: Running) -> None:
    answers = []
    for auth in ((ALICE[0], "wrong"), ("mallory", ALICE[1])):
        started = time.monotonic()
        status, body, headers = await _get(secured, "/api/topics", auth)
        assert time.monotonic() - started >= DELAY_MS / 1000
        answers.append((status, body, headers["WWW-Authenticate"]))
    assert answers[0] == answers[1]
    assert answers[0][0] == 401
    assert answers[0][1]["error"] == "SaslAuthenticationFailedError"
    records = [
        r
        for r in read_audit(secured.broker.config.data_dir)
        if r["operation"] == "http_authenticate"
    ]
    assert [(r["resource"], r["result"]) for r in records] == [
        ("user:alice", "SASL_AUTHENTICATION_FAILED"),
        ("user:mallory", "SASL_AUTHENTICATION_FAILED"),
    ]
    assert all(r["principal"] == "User:ANONYMOUS" for r in records)
    assert not any(ALICE[1] in str(r) or "wrong" in str(r["details"]) for r in records)


async def test_a_user_sees_and_reads_only_what_the_acls_allow(secured: Running) -> None:
    status, body, _ = await _get(secured, "/api/topics", ALICE)
    assert status == 200, body
    assert [t["name"] for t in body["topics"]] == ["a"]
    status, body, _ = await _get(secured, "/api/topics/a/partitions/0/records", ALICE)
    assert status == 200, body
    assert len(body["records"]) == 1
    status, body, _ = await _get(secured, "/api/topics/b/partitions/0/records", ALICE)
    assert status == 403
    assert body == {
        "error": "TopicAuthorizationFailedError",
        "message": "User:alice is not authorized to READ topic 'b' (no ACL allows it)",
    }
    status, body, _ = await _get(secured, "/api/topics/b", ALICE)
    assert (status, body["error"]) == (403, "TopicAuthorizationFailedError")
    for path in ("/metrics", "/api/cluster"):
        status, body, _ = await _get(secured, path, ALICE)
        assert (status, body["error"]) == (403, "ClusterAuthorizationFailedError"), path
    # the console itself needs only a user
    status, page, _ = await _get(secured, "/", ALICE)
    assert status == 200
    assert b"<html" in page.lower()
    refused = [
        r for r in read_audit(secured.broker.config.data_dir) if r["principal"] == "User:alice"
    ]
    assert {(r["resource"], r["result"]) for r in refused} >= {
        ("topic:b", "TOPIC_AUTHORIZATION_FAILED"),
        ("cluster:mq-cluster", "CLUSTER_AUTHORIZATION_FAILED"),
    }
    assert any(r["details"].get("path") == "/api/topics/b/partitions/0/records" for r in refused)


async def test_a_super_user_sees_everything(secured: Running) -> None:
    status, body, _ = await _get(secured, "/api/topics", ROOT)
    assert status == 200
    assert {"a", "b"} <= {t["name"] for t in body["topics"]}
    status, body, _ = await _get(secured, "/api/topics/b/partitions/0/records", ROOT)
    assert status == 200
    assert len(body["records"]) == 1
    status, metrics, _ = await _get(secured, "/metrics", ROOT)
    assert status == 200
    assert b"mq_" in metrics
    status, body, _ = await _get(secured, "/api/cluster", ROOT)
    assert status == 200


async def test_https_with_the_broker_certificate(tmp_path: Path, pki: Pki) -> None:
    async with running_broker(
        tmp_path / "data",
        authorizer="acl",
        super_users=(ROOT[0],),
        http_port=0,
        http_tls="on",
        tls_cert=str(pki.server.cert),
        tls_key=str(pki.server.key),
    ) as running:
        await _user(running, *ROOT)
        assert running.server.http is not None
        assert running.server.http.tls
        trusting = ssl.create_default_context(cafile=str(pki.ca))
        status, body, _ = await _get(running, "/api/topics", ROOT, trusting)
        assert status == 200, body
        status, body, _ = await _get(running, "/api/topics", None, trusting)
        assert status == 401
        # plain HTTP on that port is no HTTP answer
        url = f"http://127.0.0.1:{running.server.http.port}/healthz"
        timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            with pytest.raises(aiohttp.ClientError):
                async with session.get(url) as response:
                    await response.read()


async def test_without_security_everything_stays_open(tmp_path: Path) -> None:
    async with running_broker(tmp_path / "data", http_port=0) as running:
        assert running.server.http is not None
        assert not running.server.http.tls
        for path in ("/metrics", "/api/topics", "/api/cluster", "/"):
            status, body, _ = await _get(running, path)
            assert status == 200, (path, body)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_real_mq_serve_with_acls_refuses_anonymous(tmp_path: Path) -> None:
    process = BrokerProcess(
        tmp_path / "data",
        settings={"authorizer": "acl"},
        segment_bytes=16 << 20,
        http_port=0,
    )
    process.start()
    try:
        for path in ("/metrics", "/api/topics", "/"):
            assert _status(f"{process.http_url}{path}") == 401, path
        assert _status(f"{process.http_url}/healthz") == 200
    finally:
        process.stop()


def test_the_default_mq_serve_http_stays_open(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", segment_bytes=16 << 20, http_port=0)
    process.start()
    try:
        for path in ("/metrics", "/api/topics", "/"):
            assert _status(f"{process.http_url}{path}") == 200, path
    finally:
        process.stop()

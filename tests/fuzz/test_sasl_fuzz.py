"""Fuzz the SASL exchange of a live broker (issue 19): malformed SASL messages, replays,
steps out of order, oversized messages, unknown mechanisms, pipelined steps.

A real ``mq serve`` with a plaintext and a ``sasl_plaintext`` listener gets
:data:`CASES` connections, each drawn from a ``random.Random`` seeded with
:data:`SEED` (``MQ_FUZZ_SEED=n`` picks another; it is in every failure message).
Every case must end in an error response or a closed connection — never a
completed login without the password — and afterwards the broker still runs, a
real user still logs in, the plaintext listener still serves, and no traceback
was logged.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from scramp import ScramClient

import mq
from mq.client.connection import Connection
from mq.client.security import security_from
from mq.errors import MQError
from mq.wire.apis_core import AUTHENTICATE, METADATA

SEED = int(os.environ.get("MQ_FUZZ_SEED", "19"))
CASES = 300
PASSWORD = "fuzz-password"
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "GSSAPI", "", "scram-sha-256", "X" * 200]


@pytest.fixture(scope="module")
def sasl_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    settings: dict[str, Any] = {
        "listeners": ["plaintext://127.0.0.1:0", "sasl_plaintext://127.0.0.1:0"],
        "sasl_failed_authentication_delay_ms": 0,
        "authorizer": "none",  # the exchange is under test, not the ACLs
    }
    process = BrokerProcess(tmp_path_factory.mktemp("fuzz") / "data", settings=settings)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _listener(process: BrokerProcess, name: str) -> tuple[str, int]:
    for line in process.output:
        found = re.search(rf"mq listener {name} on (\S+):(\d+)", line)
        if found:
            return found[1], int(found[2])
    raise AssertionError(f"no {name} listener in {process.output}")


def _client_messages(user: str, password: str, mechanism: str) -> tuple[ScramClient, bytes]:
    client = ScramClient([mechanism], user, password)
    return client, client.get_client_first().encode()


async def _captured_exchange(host: str, port: int) -> list[bytes]:
    """The client messages of one successful login (for replays)."""
    conn = await Connection.open(host, port)
    try:
        client, first = _client_messages("fuzzer", PASSWORD, "SCRAM-SHA-256")
        reply = await conn.call(AUTHENTICATE, {"mechanism": "SCRAM-SHA-256", "auth_bytes": first})
        client.set_server_first(reply["auth_bytes"].decode())
        final = client.get_client_final().encode()
        done = await conn.call(AUTHENTICATE, {"mechanism": "SCRAM-SHA-256", "auth_bytes": final})
        assert done["complete"]
        return [first, final]
    finally:
        conn.close()


def _garbage(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 64))
    if kind == 1:  # oversized (the wire allows 64 KiB, the broker 4 KiB)
        return b"n,,n=fuzzer,r=" + b"a" * rng.choice([4097, 20_000, 65_000])
    if kind == 2:  # a plausible client-first with odd fields
        name = rng.choice(["fuzzer", "", "=2C", "a,b", "\u00e9", "x" * 300])
        header = rng.choice(["n,,", "y,,", "p=tls-unique,,", "n,a=admin,", "", "n"])
        return f"{header}n={name},r={rng.randbytes(8).hex()}".encode(errors="ignore")
    if kind == 3:  # a client-final out of order
        return b"c=biws,r=abc,p=" + rng.randbytes(32).hex().encode()
    if kind == 4:  # PLAIN-shaped
        return b"\0".join(rng.randbytes(rng.randrange(0, 20)) for _ in range(rng.randrange(1, 5)))
    return bytes([0xFF, 0xFE]) + rng.randbytes(10)  # not UTF-8


async def _case(rng: random.Random, host: str, port: int, replay: list[bytes]) -> bool:
    """One hostile connection; True if it ended authenticated (it must not)."""
    conn = await Connection.open(host, port)
    try:
        steps: list[tuple[str, bytes]] = []
        kind = rng.randrange(5)
        mechanism = rng.choice(MECHANISMS)
        if kind == 0:  # replay of a real login's messages
            steps = [("SCRAM-SHA-256", m) for m in replay]
        elif kind == 1:  # a real first step, then garbage or a replayed final
            _, first = _client_messages("fuzzer", PASSWORD, "SCRAM-SHA-256")
            steps = [
                ("SCRAM-SHA-256", first),
                ("SCRAM-SHA-256", rng.choice([replay[1], _garbage(rng)])),
            ]
        elif kind == 2:  # the mechanism changes mid-exchange
            _, first = _client_messages("fuzzer", PASSWORD, "SCRAM-SHA-256")
            steps = [("SCRAM-SHA-256", first), ("SCRAM-SHA-512", replay[1])]
        else:
            steps = [(mechanism, _garbage(rng)) for _ in range(rng.randrange(1, 4))]
        pipelined = rng.random() < 0.3
        futures = []
        for mech, message in steps:
            body = {"mechanism": mech, "auth_bytes": message}
            if pipelined:
                futures.append(await conn.request(AUTHENTICATE, body))
            else:
                try:
                    reply = await conn.call(AUTHENTICATE, body, timeout_s=20)
                except MQError:
                    break
                if reply["complete"]:
                    return True
        for future in futures:
            try:
                if (await future)["complete"]:
                    return True
            except MQError:
                pass
        try:  # whatever happened, the connection is not authenticated
            await conn.call(METADATA, {"topics": []}, timeout_s=20)
        except MQError:
            return False
        return True
    except MQError:
        return False
    finally:
        conn.close()


async def test_the_sasl_exchange_survives_fuzzing(sasl_process: BrokerProcess) -> None:
    host, port = _listener(sasl_process, "PLAINTEXT")
    async with mq.Admin(f"{host}:{port}") as admin:
        await admin.add_user("fuzzer", PASSWORD)
    sasl_host, sasl_port = _listener(sasl_process, "SASL_PLAINTEXT")
    await asyncio.sleep(0.5)  # the user reaches the broker's cache through its watch
    replay = await _captured_exchange(sasl_host, sasl_port)
    rng = random.Random(SEED)
    wrongly_in = 0
    for _ in range(CASES):
        wrongly_in += await _case(rng, sasl_host, sasl_port, replay)
    assert wrongly_in == 0, (
        f"seed {SEED}: {wrongly_in} connections authenticated without the password"
    )
    assert sasl_process.alive, f"seed {SEED}: the broker died"
    # still serving: a real login and the plaintext listener
    security = security_from(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_plain_username": "fuzzer",
            "sasl_plain_password": PASSWORD,
        }
    )
    conn = await Connection.open(sasl_host, sasl_port, security=security)
    await conn.call(METADATA, {"topics": []})
    conn.close()
    async with mq.Admin(f"{host}:{port}") as admin:
        assert "fuzzer" in await admin.list_users()
    assert not [line for line in sasl_process.output if "Traceback" in line], (
        f"seed {SEED}: a traceback was logged"
    )

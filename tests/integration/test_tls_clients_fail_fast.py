"""A client whose TLS handshake is refused fails at once with the TLS error (issue 23).

The clients bootstrap through ``Client.call_any``, which tries the next broker on a
network error. A refused handshake (a broker certificate the client's CA does not
vouch for) is a
:class:`~mq.errors.TlsMismatchError`, not retriable: it used to be swallowed there and
re-raised as a retriable ``NetworkError("no broker answered ...")``, so a caller
that retries retriable errors (the Spark connector, for ``retryTimeoutMs``) retried
a configuration mistake as if the broker were restarting.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import Running, running_broker
from tls_certs import Pki, make_pki

import mq
from mq.errors import TlsMismatchError

FAIL_FAST_S = 5.0
"""Well under the 10 s connect timeout (a bound, not a measure)."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def tls_broker(tmp_path: Path, pki: Pki) -> AsyncIterator[Running]:
    settings: dict[str, Any] = {
        "listeners": ("ssl://127.0.0.1:0",),
        "tls_cert": str(pki.server.cert),
        "tls_key": str(pki.server.key),
        "authorizer": "none",
    }
    async with running_broker(tmp_path / "data", **settings) as running:
        yield running


def _bootstrap(running: Running) -> str:
    host, port = running.server.bound["SSL"]
    return f"{host}:{port}"


@pytest.mark.parametrize("client", ["Admin", "Producer", "Consumer"])
async def test_an_untrusted_broker_certificate_fails_the_start_at_once(
    tls_broker: Running, pki: Pki, client: str
) -> None:
    security = {"security_protocol": "SSL", "ssl_cafile": str(pki.other_ca)}
    make = {
        "Admin": lambda: mq.Admin(_bootstrap(tls_broker), **security),
        "Producer": lambda: mq.Producer(_bootstrap(tls_broker), **security),
        "Consumer": lambda: mq.Consumer("t", bootstrap=_bootstrap(tls_broker), **security),
    }[client]
    started = time.monotonic()
    with pytest.raises(TlsMismatchError, match="certificate is refused") as caught:
        async with make():
            pass
    assert time.monotonic() - started < FAIL_FAST_S
    assert not caught.value.retriable

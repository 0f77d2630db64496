"""The broker's HTTP listener (issue 21) on a real ``mq serve --http-port 0`` process:
the port bound is printed and found, ``/healthz`` and ``/readyz`` answer JSON, an
unknown path is a 404, and a broker without ``--http-port`` opens no HTTP port."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess

HTTP_TIMEOUT_S = 30.0


def get(url: str) -> tuple[int, Any]:
    """GET ``url``: the status and the JSON body (errors included)."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, json.loads(body) if body.startswith(b"{") else body.decode()


@pytest.fixture(scope="module")
def http_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("http") / "data", segment_bytes=16 << 20, http_port=0
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_the_bound_port_is_printed_and_serves_health(http_broker: BrokerProcess) -> None:
    assert http_broker.http_port not in (None, 0)
    assert http_broker.http_port != http_broker.port
    status, body = get(f"{http_broker.http_url}/healthz")
    assert status == 200
    assert body == {"status": "ok", "node_id": 0}


def test_a_single_node_is_ready_with_no_reasons(http_broker: BrokerProcess) -> None:
    status, body = get(f"{http_broker.http_url}/readyz")
    assert status == 200, body
    assert body["status"] == "ready"
    assert body["reasons"] == []


def test_an_unknown_path_is_404(http_broker: BrokerProcess) -> None:
    status, _ = get(f"{http_broker.http_url}/no-such-page")
    assert status == 404


def test_without_http_port_there_is_no_http_listener(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", segment_bytes=16 << 20)
    process.start()
    try:
        assert process.http_port is None
        assert not any("HTTP listening" in line for line in process.output)
    finally:
        process.stop()

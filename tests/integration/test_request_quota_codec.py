"""A big request's decoding, done in the codec thread, is charged to its client's request
quota (issue 20): what the event loop spares by handing the work to that thread is
still the broker's time, and a client whose requests cost mostly decoding must not
get it for free.

The codec thread is made to burn a known amount of CPU per big request (its
decoder wrapped to spin for :data:`BURNED_S` of thread time), so that the charge
is far above anything the handler itself costs: with a 1 % quota
(10 ms per second, a burst of one second), one such request puts the client
:data:`BURNED_S` / 1 % of wall time in debt, more than ``quota_max_throttle_ms``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import running_broker

import mq
from mq.broker import pacing
from mq.client.connection import Connection
from mq.records.records import build_batch
from mq.wire.apis_data import PRODUCE

BURNED_S = 0.2
MAX_THROTTLE_MS = 10_000
CLIENT_ID = "heavy-decoder"


def _burning(decode: Any) -> Any:
    def decode_payload(payload: bytes) -> tuple[Any, float]:
        request, spent = decode(payload)
        started = time.thread_time()
        while time.thread_time() - started < BURNED_S:
            pass
        return request, spent + time.thread_time() - started

    return decode_payload


async def test_a_big_requests_decoding_is_charged_to_its_request_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pacing, "decode_payload", _burning(pacing.decode_payload))
    value = b"x" * (pacing.OFFLOAD_BYTES + 1024)  # decoded in the codec thread
    batch = build_batch([(None, value, (), int(time.time() * 1000))])
    body = {
        "acks": 1,
        "timeout_ms": 10_000,
        "topics": [{"name": "big", "partitions": [{"partition": 0, "records": batch}]}],
    }
    async with running_broker(tmp_path / "data", quota_max_throttle_ms=MAX_THROTTLE_MS) as broker:
        async with mq.Admin(broker.bootstrap) as admin:
            await admin.create_topic("big", partitions=1)
            await admin.alter_client_quotas(
                mq.QuotaEntity(client_id=CLIENT_ID), {"request_percentage": 1}
            )
        host, port = broker.bootstrap.rsplit(":", 1)
        conn = await Connection.open(host, int(port), client_id=CLIENT_ID)
        try:
            deadline = time.monotonic() + 10  # the quota reaches the connection within 1 s
            while conn.throttled_ms == 0 and time.monotonic() < deadline:
                response = await conn.call(PRODUCE, body)
                [partition] = response["topics"][0]["partitions"]
                assert partition["error"] == 0
                await asyncio.sleep(0.1)
        finally:
            conn.close()
    # charged the codec thread's 0.2 s: 19 s of debt, capped; the handler alone
    # (an append) costs well under the 10 ms burst and was never throttled
    assert conn.throttled_ms >= MAX_THROTTLE_MS / 2

"""A client sending only failing requests is throttled like any other (issue 20, KIP-124).

Its request quota counts every request, the ones that fail included: refused at the
gate (a client asking for a broker-to-broker API: CLUSTER_AUTHORIZATION_FAILED),
failed by their handler (INVALID_REQUEST), or not even decodable (an unknown API:
UNSUPPORTED_VERSION). Their error responses carry ``throttle_time_ms`` and the broker
stops reading the connection for that long, so the flood cannot outrun its quota.

The clients are raw sockets that ignore ``throttle_time_ms`` (as a hostile client
would) and keep :data:`IN_FLIGHT` requests outstanding: only the broker's pacing can
slow them. Two tenants send the same failing requests at once against a real broker
process: ``flood`` has a 1 % request quota, ``bystander`` none. The fair dispatcher
serves the two alike when neither is throttled (before the fix the flood's failures
were free and it got as many answers as the bystander); with the fix the flood gets
1 % of the event loop and is held back most of the window, while the bystander is
never throttled and gets many times more answers.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgpack
import pytest
from broker_process import BrokerProcess

import mq
from mq.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    UnsupportedVersionError,
)
from mq.wire.apis_quotas import DESCRIBE_CLIENT_QUOTAS, THROTTLE_TIME_KEY
from mq.wire.apis_replication import REPLICA_FETCH
from mq.wire.frames import encode_frame

TEST_TIMEOUT_S = 120
WINDOW_S = 5.0
"""How long both tenants send; answers counted within it."""
IN_FLIGHT = 32
"""Requests each raw client keeps outstanding (it sends one more per answer)."""
QUOTA_PERCENT = 1
BURST_MS = 1
"""The broker's quota_burst_ms: the flood's bucket holds 10 us of loop time at 1 %, so
two cheap requests in a row after a throttle always find it in debt again."""
BIG_TOPICS = 100
"""Topics of the refused replica_fetch: its decoding (schema checks) takes the loop a
few hundred microseconds (more on a loaded machine), so the flood's throttles are long
next to the loop's latency (and the frame stays far below pacing.OFFLOAD_BYTES: it is
decoded on the loop, and charged)."""
MAX_THROTTLE_MS = 1_000
"""The broker's quota_max_throttle_ms: a slow decoding (a loaded machine) cannot hold
the flood past the window in one throttle; it still gets at most one answer per
second while its debt lasts."""
RUN = 4
"""Each cheap failing request is sent this many times in a row (see BURST_MS)."""
MIN_RATIO = 5
"""The bystander gets at least this many times the flood's answers (about 1 to 1
without the fix: the dispatcher shares the loop fairly between the two tenants; ~30
with it: the flood has 1 % of the loop)."""
MIN_HELD_FRACTION = 0.5
"""The flood is told to stay quiet for at least this part of the window."""
UNKNOWN_API = 30_000
"""An API key no API has: the request is refused before any gate, undecodable."""
REFUSALS = {
    ClusterAuthorizationFailedError.code,
    InvalidRequestError.code,
    UnsupportedVersionError.code,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("throttle-errors") / "data",
        settings={"quota_burst_ms": BURST_MS, "quota_max_throttle_ms": MAX_THROTTLE_MS},
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def failing_requests(client_id: str) -> list[bytes]:
    """One cycle of failing requests' frames: refused at the gate (a client asking for
    the broker-to-broker replica_fetch), failed by the handler (a describe filter
    naming an entity type twice), undecodable (an unknown API)."""
    topics = [
        {
            "name": f"t{i}",
            "partitions": [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": 0}],
        }
        for i in range(BIG_TOPICS)
    ]
    fetch = {"replica_id": 7, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1024}
    describe = {"components": [{"entity_type": "user"}, {"entity_type": "user"}]}
    return [
        encode_frame([REPLICA_FETCH.key, 0, 1, client_id, {**fetch, "topics": topics}]),
        *[encode_frame([DESCRIBE_CLIENT_QUOTAS.key, 0, 2, client_id, describe])] * RUN,
        *[encode_frame([UNKNOWN_API, 0, 3, client_id, {}])] * RUN,
    ]


@dataclass
class Tally:
    answered: int = 0
    codes: set[int] = field(default_factory=set)
    throttled: int = 0
    """Answers that carried a throttle time."""
    throttled_codes: set[int] = field(default_factory=set)
    held_ms: int = 0
    """The throttle times told, added up."""


async def pipeline(host: str, port: int, client_id: str, deadline: float) -> Tally:
    """Keep IN_FLIGHT failing requests outstanding until ``deadline``; what came back."""
    tally = Tally()
    frames = itertools.cycle(failing_requests(client_id))
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"".join(next(frames) for _ in range(IN_FLIGHT)))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    (size,) = struct.unpack(">I", await reader.readexactly(4))
                    payload = await reader.readexactly(size)
            except TimeoutError:
                break
            _cid, code, body = msgpack.unpackb(payload)
            tally.answered += 1
            tally.codes.add(code)
            throttle = body.get(THROTTLE_TIME_KEY, 0)
            if throttle > 0:
                tally.throttled += 1
                tally.throttled_codes.add(code)
                tally.held_ms += throttle
            writer.write(next(frames))
    finally:
        writer.close()
    return tally


async def quota_applied(bootstrap: str, client_id: str) -> None:
    """Until the broker's quota cache has the flood's quota (bounded)."""
    async with mq.Admin(bootstrap) as admin:
        await admin.alter_client_quotas(
            mq.QuotaEntity(client_id=client_id), {"request_percentage": QUOTA_PERCENT}
        )
        for _ in range(200):
            described = await admin.describe_client_quotas()
            if any(q.entity.client_id == client_id for q in described):
                return
            await asyncio.sleep(0.05)
    raise AssertionError("the quota never showed in the broker's cache")


async def test_a_flood_of_failing_requests_is_throttled_and_others_are_not(
    broker: BrokerProcess,
) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        await quota_applied(broker.bootstrap, "flood")
        host, port = broker.bootstrap.rsplit(":", 1)
        deadline = time.monotonic() + WINDOW_S
        flood, bystander = await asyncio.gather(
            pipeline(host, int(port), "flood", deadline),
            pipeline(host, int(port), "bystander", deadline),
        )
    assert flood.codes == REFUSALS, flood  # only failures, of every kind
    assert bystander.codes == REFUSALS, bystander
    # every kind of failure carries the throttle time, and the flood is held back
    assert flood.throttled_codes == REFUSALS, flood
    assert flood.held_ms >= MIN_HELD_FRACTION * WINDOW_S * 1000, flood
    # the other tenant is neither throttled nor slowed by it
    assert bystander.throttled == 0, bystander
    assert bystander.answered >= MIN_RATIO * flood.answered, (flood, bystander)

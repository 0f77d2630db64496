"""Fuzz a live broker with greedy connections: non-reading, slow-reading, partial-frame.

A real ``mq serve`` with small connection bounds gets, for :data:`ABUSE_S`
seconds, lanes of greedy clients (each drawing from its own
``random.Random`` seeded from :data:`SEED`; ``MQ_FUZZ_SEED=n`` picks another
one, and it is in every failure message):

- *non-reading*: pipelines random valid requests (metadata, api_versions,
  small produces, fetches), pipelined in bursts of up to 3,000 per write
  (the attack of issue 18's F1), and never reads a byte;
- *slow*: pipelines requests and reads its responses one byte at a time,
  checking each response it completes belongs to a request it sent;
- *partial*: sends a length prefix of a random size up to the frame bound and
  then a random part of the frame, sometimes dribbling, sometimes going
  silent, sometimes closing mid-frame, then starts over on a new connection.

All along, a quiet client produces a numbered record, reads it back and asks
for api_versions, each answered within :data:`QUIET_TIMEOUT_S`. Afterwards
the broker still runs, its RSS stayed under :data:`RSS_BOUND` (sampled all
along), a fresh connection is served, every record the quiet client was
acknowledged is there in order, and no traceback was logged.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess

from mq.records.records import build_batch, decode_records
from mq.wire import apis_core, apis_data
from mq.wire.frames import FrameDecoder
from mq.wire.messages import decode_response, encode_request, unpack_response
from mq.wire.registry import Api

SEED = int(os.environ.get("MQ_FUZZ_SEED", "20261125"))
MiB = 1 << 20
ABUSE_S = 8.0
"""How long the greedy lanes run."""
SETUP_TIMEOUT_S = 60.0
"""Creating the topics before the abuse (302 of them: seconds on a busy machine)."""
QUIET_TIMEOUT_S = 5.0
"""Each of the quiet client's calls is answered within this (a bound, not a speed)."""
RSS_BOUND = 400 * MiB
"""The broker's RSS while it is abused: its budget (48 MiB) and per-connection bounds keep
it far below; without them, these lanes take it past a gigabyte."""
LANES = {"non_reading": 6, "slow": 2, "partial": 6}
SETTINGS: dict[str, int] = {
    "max_inflight_requests": 4,
    "max_frame_bytes": 16 * MiB,
    "max_queued_response_bytes": 64 * 1024,
    "queued_max_bytes": 48 * MiB,
    "unfinished_frame_timeout_ms": 1_500,
    "response_stall_timeout_ms": 1_500,
    "close_linger_ms": 1_000,
}
TOPIC = "quiet"
NOISE_TOPIC = "noise"
EXTRA_TOPICS = 300
"""More topics, so that a small metadata request asks for a ~30 KB response: what a
non-reading client piles up in the broker."""


@pytest.fixture
def fuzzed(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", settings=SETTINGS, segment_bytes=16 * MiB)
    process.start()
    try:
        yield process
    finally:
        process.stop()


class Client:
    """A blocking request/response connection (for setup and the quiet client)."""

    def __init__(self, broker: BrokerProcess, timeout_s: float = QUIET_TIMEOUT_S) -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=timeout_s)
        self.decoder: FrameDecoder[bytes] = FrameDecoder()
        self.cid = 0

    def call(self, api: Api[Any, Any], body: Any) -> Any:
        self.cid += 1
        self.sock.sendall(encode_request(api, 0, self.cid, "quiet", body))
        while True:
            for payload in self.decoder.frames():
                response = decode_response(payload, api, 0)
                assert response.correlation_id == self.cid
                return response.result()
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the quiet client's connection")
            self.decoder.feed(data)

    def close(self) -> None:
        self.sock.close()


def produce_body(topic: str, value: bytes) -> Any:
    records = build_batch([(None, value, [], int(time.time() * 1000))])
    partitions = [{"partition": 0, "records": records}]
    return {"acks": -1, "timeout_ms": 5000, "topics": [{"name": topic, "partitions": partitions}]}


def fetch_body(topic: str, offset: int, wait_ms: int = 0) -> Any:
    partition = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": MiB}
    return {
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": MiB,
        "topics": [{"name": topic, "partitions": [partition]}],
    }


def random_request(rng: random.Random, cid: int) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return encode_request(apis_core.METADATA, 0, cid, "greedy", {"topics": None})
    if kind == 1:
        return encode_request(apis_core.API_VERSIONS, 0, cid, "greedy", {})
    if kind == 2:
        value = rng.randbytes(rng.randrange(1, 2048))
        return encode_request(apis_data.PRODUCE, 0, cid, "greedy", produce_body(NOISE_TOPIC, value))
    wait_ms = rng.choice((0, 0, 500))
    body = fetch_body(NOISE_TOPIC, rng.randrange(0, 50), wait_ms)
    return encode_request(apis_data.FETCH, 0, cid, "greedy", body)


def connect(broker: BrokerProcess) -> socket.socket:
    sock = socket.create_connection((broker.host, broker.port), timeout=1.0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return sock


def non_reading(broker: BrokerProcess, rng: random.Random, deadline: float) -> None:
    """Pipeline requests and never read; reconnect when the broker closes the connection."""
    while time.monotonic() < deadline:
        sock = connect(broker)
        sock.setblocking(False)
        cid = 0
        try:
            while time.monotonic() < deadline:
                burst = []
                metadata_only = rng.random() < 0.5  # small requests, large responses
                for _ in range(rng.choice((rng.randrange(1, 65), rng.randrange(500, 3000)))):
                    cid += 1
                    burst.append(
                        encode_request(apis_core.METADATA, 0, cid, "greedy", {"topics": None})
                        if metadata_only
                        else random_request(rng, cid)
                    )
                data = memoryview(b"".join(burst))
                while data and time.monotonic() < deadline:
                    try:
                        data = data[sock.send(data) :]
                    except BlockingIOError:
                        time.sleep(0.02)
        except OSError:
            pass  # closed by the broker (its client did not read): start over
        finally:
            sock.close()


def slow(broker: BrokerProcess, rng: random.Random, deadline: float) -> None:
    """Pipeline a few requests, read the answers a byte at a time, check their ids."""
    while time.monotonic() < deadline:
        sock = connect(broker)
        decoder: FrameDecoder[bytes] = FrameDecoder()
        sent: set[int] = set()
        try:
            for cid in range(1, rng.randrange(2, 12)):
                sock.sendall(random_request(rng, cid))
                sent.add(cid)
            while sent and time.monotonic() < deadline:
                try:
                    byte = sock.recv(1)
                except TimeoutError:
                    continue
                if not byte:
                    break  # closed by the broker
                decoder.feed(byte)
                for payload in decoder.frames():
                    cid = unpack_response(payload).correlation_id
                    assert cid in sent, f"seed {SEED}: a response to no request ({cid})"
                    sent.discard(cid)
                time.sleep(rng.choice((0.0, 0.0, 0.001)))
        except (ConnectionError, TimeoutError):
            pass
        finally:
            sock.close()


def partial(broker: BrokerProcess, rng: random.Random, deadline: float) -> None:
    """Begin frames and never finish them."""
    while time.monotonic() < deadline:
        sock = connect(broker)
        try:
            size = rng.choice(
                (rng.randrange(1, 4096), rng.randrange(1, SETTINGS["max_frame_bytes"]))
            )
            sock.sendall(struct.pack(">I", size))
            part = rng.randrange(0, size)
            mode = rng.randrange(3)
            if mode == 0:  # all but the tail at once, then silence
                sock.sendall(bytes(part))
                time.sleep(
                    min(deadline - time.monotonic(), 2.0) if deadline > time.monotonic() else 0
                )
            elif mode == 1:  # dribble
                for _ in range(rng.randrange(1, 50)):
                    sock.sendall(rng.randbytes(rng.randrange(1, 64)))
                    time.sleep(0.02)
            # mode 2: close mid-frame at once
        except OSError:
            pass
        finally:
            sock.close()


def read_values(client: Client, topic: str) -> list[bytes]:
    values: list[bytes] = []
    offset = 0
    for _ in range(10_000):
        part = client.call(apis_data.FETCH, fetch_body(topic, offset))["topics"][0]["partitions"][0]
        assert part["error"] == 0, part
        if not part["records"]:
            return values
        data, pos = part["records"], 0
        while pos < len(data):
            size = struct.unpack_from(">i", data, pos + 8)[0] + 12
            for record in decode_records(data[pos : pos + size]):
                if record.offset >= offset:
                    values.append(record.value or b"")
            pos += size
        offset = len(values)
    raise AssertionError("the topic did not end")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def test_greedy_connections_leave_a_quiet_client_served(fuzzed: BrokerProcess) -> None:
    setup = Client(fuzzed, SETUP_TIMEOUT_S)
    topics = [
        {"name": name, "partitions": 1, "replication_factor": 1, "configs": {}}
        for name in (TOPIC, NOISE_TOPIC, *(f"x{i:04d}" for i in range(EXTRA_TOPICS)))
    ]
    try:
        body = {"topics": topics, "timeout_ms": int(SETUP_TIMEOUT_S * 1000)}
        result = setup.call(apis_core.CREATE_TOPICS, body)
        assert all(t["error"] == 0 for t in result["topics"]), result
    finally:
        setup.close()

    deadline = time.monotonic() + ABUSE_S
    master = random.Random(SEED)
    lanes: dict[str, Callable[[BrokerProcess, random.Random, float], None]] = {
        "non_reading": non_reading,
        "slow": slow,
        "partial": partial,
    }
    errors: list[BaseException] = []

    def run(target: Callable[[BrokerProcess, random.Random, float], None], seed: int) -> None:
        try:
            target(fuzzed, random.Random(seed), deadline)
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(lanes[kind], master.randrange(1 << 32)), daemon=True)
        for kind, count in LANES.items()
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()

    quiet = Client(fuzzed)
    acknowledged: list[bytes] = []
    peak_rss = 0
    try:
        for i in range(100_000):
            if time.monotonic() >= deadline:
                break
            value = b"quiet-%06d" % i
            part = quiet.call(apis_data.PRODUCE, produce_body(TOPIC, value))
            assert part["topics"][0]["partitions"][0]["error"] == 0, (SEED, part)
            acknowledged.append(value)
            assert quiet.call(apis_core.API_VERSIONS, {})["apis"]
            peak_rss = max(peak_rss, rss_bytes(fuzzed.pid))
            time.sleep(0.05)
    finally:
        for thread in threads:
            thread.join(QUIET_TIMEOUT_S + 5.0)
    assert not errors, f"seed {SEED}: {errors[0]!r}"
    assert len(acknowledged) >= 10, f"seed {SEED}: the quiet client was barely served"
    assert peak_rss < RSS_BOUND, f"seed {SEED}: the broker's RSS reached {peak_rss / MiB:.0f} MiB"

    assert fuzzed.alive
    fresh = Client(fuzzed)
    try:
        assert fresh.call(apis_core.API_VERSIONS, {})["apis"]
        assert read_values(fresh, TOPIC) == acknowledged, f"seed {SEED}"
    finally:
        fresh.close()
        quiet.close()
    log = "".join(fuzzed.output)
    assert "Traceback" not in log, f"seed {SEED}: the broker logged a traceback: {log[-5000:]}"

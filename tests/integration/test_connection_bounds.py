"""The connection layer's bounds against greedy clients, on a real ``mq serve`` (issue 18).

Each test plays one greedy client with raw sockets (non-reading, partial
frames, parked long polls then a close, garbage after a valid request, too
many connections, idle) and checks, from outside the process, that the
broker bounds it (its RSS from /proc, its sockets' TCP states from
/proc/net/tcp), closes what must be closed, and keeps serving a quiet client.
The broker runs with small bounds (``SETTINGS``) so the tests are quick; every
wait is bounded.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess

from mq.records.records import build_batch
from mq.wire import apis_core, apis_data
from mq.wire.frames import FrameDecoder
from mq.wire.messages import decode_response, encode_request, unpack_response
from mq.wire.registry import Api

MiB = 1 << 20
TIMEOUT_S = 10.0
SETUP_TIMEOUT_S = 60.0
"""Creating the shared broker's topics (300: seconds on a busy machine)."""
SETTINGS: dict[str, int] = {
    "max_inflight_requests": 4,
    "max_frame_bytes": 16 * MiB,
    "max_queued_response_bytes": 64 * 1024,
    "max_pending_request_bytes": 64 * 1024,
    "queued_max_bytes": 48 * MiB,
    "unfinished_frame_timeout_ms": 2_000,
    "response_stall_timeout_ms": 2_000,
    "connections_max_idle_ms": 4_000,
    "close_linger_ms": 2_000,
}
TOPICS = 300
"""Topics of the shared broker: a metadata response for all of them is ~30 KB, so
small requests ask for large responses (what a non-reading client piles up)."""


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("bounded"), settings=SETTINGS, segment_bytes=16 * MiB
    )
    process.start()
    try:
        with Raw(process, timeout_s=SETUP_TIMEOUT_S) as raw:
            topics = [
                {"name": f"t{i:04d}", "partitions": 1, "replication_factor": 1, "configs": {}}
                for i in range(TOPICS)
            ]
            body = {"topics": topics, "timeout_ms": int(SETUP_TIMEOUT_S * 1000)}
            result = raw.call(apis_core.CREATE_TOPICS, body)
            assert all(t["error"] == 0 for t in result["topics"]), result
        yield process
    finally:
        process.stop()


class Raw:
    """A blocking connection: requests out, responses in, matched by correlation id."""

    def __init__(
        self, broker: BrokerProcess, source: str | None = None, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.sock = socket.create_connection(
            (broker.host, broker.port),
            timeout=timeout_s,
            source_address=None if source is None else (source, 0),
        )
        self.decoder: FrameDecoder[bytes] = FrameDecoder()
        self.cid = 0
        self.apis: dict[int, Api[Any, Any]] = {}

    def frame(self, api: Api[Any, Any], body: Any) -> bytes:
        self.cid += 1
        self.apis[self.cid] = api
        return encode_request(api, 0, self.cid, "bounds-test", body)

    def send(self, api: Api[Any, Any], body: Any) -> int:
        self.sock.sendall(self.frame(api, body))
        return self.cid

    def receive(self) -> tuple[int, Any]:
        while True:
            for payload in self.decoder.frames():
                envelope = unpack_response(payload)
                api = self.apis.pop(envelope.correlation_id)
                return envelope.correlation_id, decode_response(envelope, api, 0).result()
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.decoder.feed(data)

    def call(self, api: Api[Any, Any], body: Any) -> Any:
        cid = self.send(api, body)
        got, result = self.receive()
        assert got == cid
        return result

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def produce_body(topic: str, value: bytes) -> Any:
    records = build_batch([(None, value, [], int(time.time() * 1000))])
    partitions = [{"partition": 0, "records": records}]
    return {"acks": -1, "timeout_ms": 5000, "topics": [{"name": topic, "partitions": partitions}]}


def fetch_body(topic: str, offset: int, wait_ms: int) -> Any:
    partition = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": MiB}
    return {
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": MiB,
        "topics": [{"name": topic, "partitions": [partition]}],
    }


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def tcp_states(port: int) -> list[str]:
    """TCP states (hex, as /proc/net/tcp has them) of the sockets whose local port is ``port``."""
    states = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port:
            states.append(fields[3])
    return states


CLOSE_WAIT = "08"


def closed_by_broker(sock: socket.socket, timeout_s: float) -> bool:
    """True if the broker closes ``sock`` within ``timeout_s`` (reading what it sends)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if not sock.recv(1 << 16):
                return True
        except TimeoutError:
            continue
        except ConnectionError:
            return True
    return False


def quiet_client_served(broker: BrokerProcess) -> None:
    """A fresh connection gets api_versions and metadata answered (bounded wait)."""
    with Raw(broker) as quiet:
        assert quiet.call(apis_core.API_VERSIONS, {})["apis"]
        assert len(quiet.call(apis_core.METADATA, {"topics": None})["topics"]) >= TOPICS


def flood_without_reading(sock: socket.socket, frame: bytes, seconds: float) -> int:
    """Send ``frame`` over and over for ``seconds`` (or until the broker stops reading
    and the socket's buffers fill), never reading; how many were sent in full."""
    sock.setblocking(False)
    sent, pending = 0, b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pending = pending or frame
        try:
            n = sock.send(pending)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        except OSError:
            break  # closed by the broker
        pending = pending[n:]
        if not pending:
            sent += 1
    return sent


def test_clients_that_never_read_are_bounded_and_closed(bounded: BrokerProcess) -> None:
    # F1: 10 connections ask for large metadata responses and never read them
    with Raw(bounded) as probe:
        frame = probe.frame(apis_core.METADATA, {"topics": None})
    before = rss_bytes(bounded.pid)
    greedy = [socket.create_connection((bounded.host, bounded.port)) for _ in range(10)]
    try:
        for sock in greedy:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        threads = [
            threading.Thread(target=flood_without_reading, args=(sock, frame, 3.0))
            for sock in greedy
        ]
        for thread in threads:
            thread.start()
        quiet_client_served(bounded)  # while they flood
        for thread in threads:
            thread.join(TIMEOUT_S)
        quiet_client_served(bounded)
        grown = rss_bytes(bounded.pid) - before
        # each holds at most its queued-response bound plus 4 responses in flight
        assert grown < 100 * MiB, f"the broker grew by {grown / MiB:.0f} MiB"
        # their clients do not read: closed after response_stall_timeout_ms (2 s)
        for sock in greedy:
            sock.setblocking(True)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        assert all(closed_by_broker(sock, 8.0) for sock in greedy)
        assert bounded.logged("has not read its responses", TIMEOUT_S), [
            line for line in bounded.output if "closing connection" in line
        ]
    finally:
        for sock in greedy:
            sock.close()
    quiet_client_served(bounded)


def test_partial_frames_are_held_to_the_memory_budget_and_time_out(bounded: BrokerProcess) -> None:
    # F6: 12 connections each send 15 MiB of a 16 MiB frame and never finish it;
    # the budget (48 MiB) admits three at a time, the others are not read
    before = rss_bytes(bounded.pid)
    header = struct.pack(">I", 16 * MiB - 8)
    body = b"\x00" * (15 * MiB)
    greedy = [socket.create_connection((bounded.host, bounded.port)) for _ in range(12)]
    try:

        def send_part(sock: socket.socket) -> None:
            sock.setblocking(False)
            data = memoryview(header + body)
            deadline = time.monotonic() + 4.0
            while data and time.monotonic() < deadline:
                try:
                    data = data[sock.send(data) :]
                except BlockingIOError:
                    time.sleep(0.01)
                except OSError:
                    return

        threads = [threading.Thread(target=send_part, args=(sock,)) for sock in greedy]
        for thread in threads:
            thread.start()
        quiet_client_served(bounded)
        for thread in threads:
            thread.join(TIMEOUT_S)
        grown = rss_bytes(bounded.pid) - before
        assert grown < 120 * MiB, f"the broker grew by {grown / MiB:.0f} MiB"
        quiet_client_served(bounded)
        # the admitted ones stay unfinished: closed after unfinished_frame_timeout_ms,
        # then the others get the budget, and time out in their turn
        for sock in greedy:
            sock.setblocking(True)
        assert all(closed_by_broker(sock, 20.0) for sock in greedy)
    finally:
        for sock in greedy:
            sock.close()
    quiet_client_served(bounded)


def test_a_closed_connection_with_parked_long_polls_is_noticed_at_once(
    bounded: BrokerProcess,
) -> None:
    # F8: max_inflight_requests (4) long polls parked, then the client goes away
    with Raw(bounded) as raw:
        for _ in range(SETTINGS["max_inflight_requests"]):
            raw.send(apis_data.FETCH, fetch_body("t0001", 0, wait_ms=30_000))
        time.sleep(0.5)  # parked
    deadline = time.monotonic() + 5.0
    while CLOSE_WAIT in tcp_states(bounded.port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert CLOSE_WAIT not in tcp_states(bounded.port), "the broker did not see the close"
    # its polls left the partition: a produce and a fetch there are served
    with Raw(bounded) as raw:
        part = raw.call(apis_data.PRODUCE, produce_body("t0001", b"after"))
        assert part["topics"][0]["partitions"][0]["error"] == 0


def test_a_close_is_noticed_even_when_the_connection_is_no_longer_read(
    bounded: BrokerProcess,
) -> None:
    # F8, past max_pending_request_bytes: 4 long polls parked, then more requests than
    # the broker reads while they are (so it stops reading), then the client goes away
    with Raw(bounded) as raw:
        for _ in range(SETTINGS["max_inflight_requests"]):
            raw.send(apis_data.FETCH, fetch_body("t0003", 0, wait_ms=30_000))
        extra = raw.frame(apis_data.FETCH, fetch_body("t0003", 0, wait_ms=30_000))
        raw.sock.sendall(extra * (2 * SETTINGS["max_pending_request_bytes"] // len(extra) + 1))
        time.sleep(0.5)  # parked, and the rest unread
    deadline = time.monotonic() + 5.0
    while CLOSE_WAIT in tcp_states(bounded.port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert CLOSE_WAIT not in tcp_states(bounded.port), "the broker did not see the close"


def test_a_valid_request_followed_by_garbage_is_answered_before_the_close(
    bounded: BrokerProcess,
) -> None:
    # F9: one write carries a produce, then a zero length prefix
    with Raw(bounded) as raw:
        raw.sock.sendall(raw.frame(apis_data.PRODUCE, produce_body("t0002", b"once")) + bytes(4))
        _, result = raw.receive()
        assert result["topics"][0]["partitions"][0]["error"] == 0
        # closed for the bad frame at once, not later by a timeout (the shortest is 2 s)
        assert closed_by_broker(raw.sock, 1.5)
    with Raw(bounded) as raw:
        part = raw.call(apis_data.FETCH, fetch_body("t0002", 0, wait_ms=0))
        assert part["topics"][0]["partitions"][0]["high_watermark"] == 1


def test_an_idle_connection_is_closed(bounded: BrokerProcess) -> None:
    with Raw(bounded) as raw:
        raw.call(apis_core.API_VERSIONS, {})
        started = time.monotonic()
        assert closed_by_broker(raw.sock, 10.0)
        assert time.monotonic() - started >= 3.0  # connections_max_idle_ms is 4 s


@pytest.fixture
def few_connections(tmp_path: Path) -> Iterator[BrokerProcess]:
    settings = {"max_connections": 5, "max_connections_per_ip": 3}
    process = BrokerProcess(tmp_path / "data", settings=settings, segment_bytes=16 * MiB)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_connections_beyond_the_bounds_are_closed_at_accept(
    few_connections: BrokerProcess,
) -> None:
    broker = few_connections
    kept = [Raw(broker) for _ in range(3)]
    try:
        for raw in kept:
            raw.call(apis_core.API_VERSIONS, {})
        refused = socket.create_connection((broker.host, broker.port), timeout=TIMEOUT_S)
        assert closed_by_broker(refused, 5.0), "a 4th connection from one address was kept"
        refused.close()
        kept += [Raw(broker, source="127.0.0.2") for _ in range(2)]  # 5 in all
        for raw in kept[3:]:
            raw.call(apis_core.API_VERSIONS, {})
        over = socket.create_connection(
            (broker.host, broker.port), timeout=TIMEOUT_S, source_address=("127.0.0.3", 0)
        )
        assert closed_by_broker(over, 5.0), "a 6th connection in all was kept"
        over.close()
        kept.pop().sock.close()  # one closes: there is room again
        deadline = time.monotonic() + 5.0
        while True:
            try:
                with Raw(broker, source="127.0.0.3") as again:
                    assert again.call(apis_core.API_VERSIONS, {})["apis"]
                break
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline, "the freed place was never given back"
                time.sleep(0.1)
    finally:
        for raw in kept:
            raw.sock.close()
    refusals = [line for line in broker.output if "refused a connection" in line]
    assert 1 <= len(refusals) <= 2, refusals  # rate-limited: one line per interval

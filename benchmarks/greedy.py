"""Greedy and careless clients for the isolation benchmark (:mod:`benchmarks.isolation`).

Each pattern is a function ``pattern(host, port, topic, stop)`` run in a child
process of its own (so it shares no event loop or GIL with the quiet client),
written with plain blocking sockets and the protocol's own encoders: what a
hostile client would send, not what mq's client library would. Every pattern
keeps going until ``stop`` is set and then closes its sockets; every loop and
every socket operation is bounded in time, so a pattern never outlives its
phase. ``topic`` is the quiet client's topic (one partition), which the
patterns that need a real partition use.

The patterns are the findings of the front-door probe (issue 18):

* ``non_reading``: connections that send small metadata requests and never read
  the answers;
* ``huge_lists``: legal requests at their list bounds: a produce naming one
  partition (of a topic of its own, auto-created) 20,000 times, an
  alter_configs naming one topic 20,000 times, a metadata request for
  100,000 topics;
* ``partial_frames``: connections that each announce a 99 MiB frame, send
  almost all of it and hold;
* ``closed_polls``: connections that park a full window of long polls on the
  quiet client's partition and close without reading;
* ``topic_flood``: create_topics of 1,000 partitions at a time, new names each
  time, up to 10,000 partitions.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event
from typing import Any

from mq.records.records import build_batch
from mq.wire import apis_core, apis_data
from mq.wire.frames import FrameDecoder
from mq.wire.messages import encode_request
from mq.wire.registry import Api

MiB = 1 << 20
IO_TIMEOUT_S = 1.0
"""Every blocking socket call of a pattern gives up after this long (then the
pattern checks ``stop`` and goes on): a broker that stops reading must not
hang the pattern past its phase."""
NON_READING_CONNECTIONS = 10
NON_READING_BURST = 4_096
"""Requests per write: a client that never reads sends its requests in big writes."""
WIDE_TOPICS = 50
PARTIAL_FRAME_CONNECTIONS = 20
PARTIAL_FRAME_BYTES = 99 * MiB
CLOSED_POLL_CONNECTIONS = 100
POLLS_PER_CONNECTION = 64
"""The broker's default ``max_inflight_requests``: a full window per connection."""
POLL_WAIT_MS = 30_000
LIST_ENTRIES = 20_000
METADATA_TOPICS = 100_000
FLOOD_PARTITIONS_PER_REQUEST = 1_000
FLOOD_MAX_PARTITIONS = 10_000

Pattern = Callable[[str, int, str, Event], None]
_cids = itertools.count(1)


def frame(api: Api[Any, Any], body: Any) -> bytes:
    return encode_request(api, 0, next(_cids), "greedy", body)


def connect(host: str, port: int) -> socket.socket | None:
    try:
        sock = socket.create_connection((host, port), timeout=IO_TIMEOUT_S)
    except OSError:
        return None  # refused or timed out: the broker's limits at work; try again later
    sock.settimeout(IO_TIMEOUT_S)
    return sock


def _send(sock: socket.socket, data: bytes | memoryview) -> bool:
    """Send what the broker takes within the timeout; False once the connection is gone."""
    try:
        sock.sendall(data)
    except TimeoutError:
        return True  # the broker stopped reading us: as intended, keep the socket
    except OSError:
        return False
    return True


def read_one(sock: socket.socket, deadline: float) -> bool:
    """Read one whole response frame; False if the socket closed or ``deadline`` passed."""
    decoder: FrameDecoder[bytes] = FrameDecoder(256 * MiB)
    while time.monotonic() < deadline:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        except OSError:
            return False
        if not data:
            return False
        decoder.feed(data)
        for _ in decoder.frames():
            return True
    return False


def _close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.close()


def non_reading(host: str, port: int, topic: str, stop: Event) -> None:
    """Send metadata requests on several connections and never read an answer.

    First it creates :data:`WIDE_TOPICS` small topics, so that each answer
    (every topic's metadata) is some 100 times the size of its request, as on
    any broker with a few dozen topics.
    """
    _create_wide_topics(host, port, stop)
    request = frame(apis_core.METADATA, {"topics": None, "allow_auto_topic_creation": False})
    burst = request * NON_READING_BURST
    socks: list[socket.socket] = []
    try:
        while not stop.is_set():
            while len(socks) < NON_READING_CONNECTIONS and not stop.is_set():
                sock = connect(host, port)
                if sock is None:
                    break
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                socks.append(sock)
            for sock in list(socks):
                if stop.is_set():
                    break
                if not _send(sock, burst):
                    socks.remove(sock)
                    sock.close()
            stop.wait(0.01)
    finally:
        _close_all(socks)


def _create_wide_topics(host: str, port: int, stop: Event) -> None:
    request = frame(
        apis_core.CREATE_TOPICS,
        {
            "topics": [
                {"name": f"wide-{i}", "partitions": 1, "replication_factor": 1}
                for i in range(WIDE_TOPICS)
            ],
            "timeout_ms": 30_000,
        },
    )
    while not stop.is_set():
        sock = connect(host, port)
        if sock is None:
            stop.wait(0.1)
            continue
        try:
            if _send(sock, request) and read_one(sock, time.monotonic() + 60):
                return
        finally:
            sock.close()


def huge_lists(host: str, port: int, topic: str, stop: Event) -> None:
    """Legal requests at their list bounds, one after another, each answer read."""
    batch = build_batch([(None, b"x" * 16, (), int(time.time() * 1000))])
    requests = [
        frame(
            apis_data.PRODUCE,
            {
                "acks": 1,
                "timeout_ms": 30_000,
                "topics": [
                    {
                        "name": f"{topic}-greedy",  # auto-created: not the quiet topic
                        "partitions": [{"partition": 0, "records": batch}] * LIST_ENTRIES,
                    }
                ],
            },
        ),
        frame(
            apis_core.ALTER_CONFIGS,
            {"topics": [{"name": topic, "configs": {"retention.ms": "604800000"}}] * LIST_ENTRIES},
        ),
        frame(
            apis_core.METADATA,
            {
                "topics": [f"no-such-topic-{i}" for i in range(METADATA_TOPICS)],
                "allow_auto_topic_creation": False,
            },
        ),
    ]
    sock: socket.socket | None = None
    try:
        for request in itertools.cycle(requests):
            if stop.is_set():
                break
            if sock is None:
                sock = connect(host, port)
                if sock is None:
                    stop.wait(0.1)
                    continue
            if not _send(sock, request) or not read_one(sock, time.monotonic() + 60):
                sock.close()
                sock = None
    finally:
        if sock is not None:
            sock.close()


def partial_frames(host: str, port: int, topic: str, stop: Event) -> None:
    """Connections that announce a 99 MiB frame, send all of it but the last byte, and hold."""
    chunk = memoryview(bytes(MiB))
    header = PARTIAL_FRAME_BYTES.to_bytes(4, "big")
    socks: list[tuple[socket.socket, int]] = []  # (socket, payload bytes sent)
    try:
        while not stop.is_set():
            while len(socks) < PARTIAL_FRAME_CONNECTIONS and not stop.is_set():
                sock = connect(host, port)
                if sock is None or not _send(sock, header):
                    break
                socks.append((sock, 0))
            for i, (sock, sent) in enumerate(socks):
                if stop.is_set():
                    break
                left = PARTIAL_FRAME_BYTES - 1 - sent
                if left <= 0:
                    continue
                try:
                    n = sock.send(chunk[: min(left, len(chunk))])
                except TimeoutError:
                    continue
                except OSError:
                    sock.close()
                    socks[i] = (sock, PARTIAL_FRAME_BYTES)  # gone; replaced below
                    continue
                socks[i] = (sock, sent + n)
            socks = [(s, n) for s, n in socks if n < PARTIAL_FRAME_BYTES]
            stop.wait(0.001)
    finally:
        _close_all([s for s, _ in socks])


def closed_polls(host: str, port: int, topic: str, stop: Event) -> None:
    """Park a full window of long polls on the quiet partition, then close without reading."""
    poll = frame(
        apis_data.FETCH,
        {
            "max_wait_ms": POLL_WAIT_MS,
            "min_bytes": 1 << 30,  # never satisfied: each poll waits its whole max_wait_ms
            "max_bytes": MiB,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": MiB}],
                }
            ],
        },
    )
    window = poll * POLLS_PER_CONNECTION
    opened = 0
    while not stop.is_set():
        if opened >= CLOSED_POLL_CONNECTIONS:
            stop.wait(0.1)  # the closed sockets' polls would still be parked on a broker
            continue  # that does not notice closes; opening more adds nothing new
        sock = connect(host, port)
        if sock is None:
            stop.wait(0.1)
            continue
        _send(sock, window)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        opened += 1


def topic_flood(host: str, port: int, topic: str, stop: Event) -> None:
    """create_topics of 1,000 partitions at a time, new names, up to 10,000 partitions."""
    sock: socket.socket | None = None
    created = 0
    try:
        for n in itertools.count():
            if stop.is_set():
                break
            if created >= FLOOD_MAX_PARTITIONS:
                stop.wait(0.1)
                continue
            if sock is None:
                sock = connect(host, port)
                if sock is None:
                    stop.wait(0.1)
                    continue
            request = frame(
                apis_core.CREATE_TOPICS,
                {
                    "topics": [
                        {
                            "name": f"flood-{n}",
                            "partitions": FLOOD_PARTITIONS_PER_REQUEST,
                            "replication_factor": 1,
                        }
                    ],
                    "timeout_ms": 60_000,
                },
            )
            if not _send(sock, request) or not read_one(sock, time.monotonic() + 120):
                sock.close()
                sock = None
            created += FLOOD_PARTITIONS_PER_REQUEST
    finally:
        if sock is not None:
            sock.close()


PATTERNS: dict[str, Pattern] = {
    "non_reading": non_reading,
    "huge_lists": huge_lists,
    "partial_frames": partial_frames,
    "closed_polls": closed_polls,
    "topic_flood": topic_flood,
}

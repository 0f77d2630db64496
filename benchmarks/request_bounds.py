"""Each list-shaped request at its schema bound, and what it costs everyone else
(issue 18, F5).

A quiet client (its own process) sends a small metadata request every few
milliseconds and notes how long each waited; meanwhile this process sends, one
after the other, every client API that has a list field with that list at its
bound (``mq.wire.limits``), most of them naming one entry over and over, the
cheapest way to a large request. For each, the table gives how long the request
itself took, what the broker answered, and the longest wait of the quiet client
while it ran. Nothing here asserts a speed: it reports.

    .venv/bin/python -m benchmarks.request_bounds                    # its own broker
    .venv/bin/python -m benchmarks.request_bounds --bootstrap HOST:PORT
    .venv/bin/python -m benchmarks.request_bounds --scale 0.2        # lists 5x shorter
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mq.local_cluster import BrokerProcess
from mq.records.records import build_batch
from mq.wire import apis_cluster, apis_core, apis_data, apis_groups, apis_queues, limits
from mq.wire.frames import FrameDecoder
from mq.wire.messages import decode_response, encode_request, unpack_response
from mq.wire.registry import Api

TOPIC = "bounds"
QUIET_PERIOD_S = 0.005
"""Pause between two of the quiet client's metadata requests."""
SOCKET_TIMEOUT_S = 300.0
"""Longest wait for one greedy answer (today's code needs ~30 s for some)."""


class Raw:
    """A blocking connection: one request, its answer (whatever its error)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
        self.decoder: FrameDecoder[bytes] = FrameDecoder()
        self.cid = 0

    def call(self, api: Api[Any, Any], body: Any) -> tuple[float, int, Any]:
        """(seconds from the first byte sent to the answer, error code, body or None)."""
        self.cid += 1
        frame = encode_request(api, 0, self.cid, "request-bounds", body)
        start = time.monotonic()
        self.sock.sendall(frame)
        while True:
            for payload in self.decoder.frames():
                envelope = unpack_response(payload)
                elapsed = time.monotonic() - start
                response = decode_response(envelope, api, 0)
                return elapsed, envelope.error_code, response.body
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.decoder.feed(data)


def _quiet(bootstrap: str) -> None:
    """The quiet client's process: ``monotonic_send latency_s`` per line, until killed."""
    raw = Raw(bootstrap)
    body = {"topics": [TOPIC], "allow_auto_topic_creation": False}
    while True:
        sent = time.monotonic()
        elapsed, _, _ = raw.call(apis_core.METADATA, body)
        print(f"{sent:.6f} {elapsed:.6f}", flush=True)
        time.sleep(QUIET_PERIOD_S)


def _requests(n: int) -> list[tuple[str, Api[Any, Any], Callable[[], Any]]]:
    """(label, api, body maker) of each greedy request; ``n`` entries per list."""
    now = int(time.time() * 1000)
    records = build_batch([(None, b"x" * 20, [], now)])
    part = {"partition": 0}
    one_topic = [TOPIC]
    return [
        (
            f"produce: partition 0 x {n}",
            apis_data.PRODUCE,
            lambda: {
                "acks": 1,
                "timeout_ms": 30_000,
                "topics": [{"name": TOPIC, "partitions": [{**part, "records": records}] * n}],
            },
        ),
        (
            f"fetch: partition 0 x {n}",
            apis_data.FETCH,
            lambda: {
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [{**part, "fetch_offset": 0, "partition_max_bytes": 1 << 16}]
                        * n,
                    }
                ],
            },
        ),
        (
            f"list_offsets: partition 0 x {n}",
            apis_data.LIST_OFFSETS,
            lambda: {"topics": [{"name": TOPIC, "partitions": [{**part, "timestamp": -1}] * n}]},
        ),
        (
            f"metadata: topic x {n}",
            apis_core.METADATA,
            lambda: {"topics": one_topic * n, "allow_auto_topic_creation": False},
        ),
        (
            f"describe_configs: topic x {n}",
            apis_core.DESCRIBE_CONFIGS,
            lambda: {"topics": [{"name": TOPIC}] * n},
        ),
        (
            f"alter_configs: topic x {n // 5}",
            apis_core.ALTER_CONFIGS,
            lambda: {
                "topics": [{"name": TOPIC, "configs": {"retention.ms": "86400000"}}] * (n // 5)
            },
        ),
        (
            f"create_topics: one name x {n}",
            apis_core.CREATE_TOPICS,
            lambda: {
                "topics": [{"name": TOPIC, "partitions": 1, "replication_factor": 1}] * n,
                "timeout_ms": 30_000,
            },
        ),
        (
            f"delete_topics: one unknown name x {n}",
            apis_core.DELETE_TOPICS,
            lambda: {"topics": ["no-such-topic"] * n, "timeout_ms": 30_000},
        ),
        (
            f"delete_records: partition 0 x {n}",
            apis_core.DELETE_RECORDS,
            lambda: {
                "topics": [{"name": TOPIC, "partitions": [{**part, "offset": 0}] * n}],
                "timeout_ms": 30_000,
            },
        ),
        (
            f"offset_commit: partition 0 x {n}",
            apis_groups.OFFSET_COMMIT,
            lambda: {
                "group_id": "bounds",
                "generation_id": -1,
                "member_id": "",
                "topics": [{"name": TOPIC, "partitions": [{**part, "offset": 0}] * n}],
            },
        ),
        (
            f"offset_fetch: partition 0 x {n}",
            apis_groups.OFFSET_FETCH,
            lambda: {"group_id": "bounds", "topics": [{"name": TOPIC, "partitions": [0] * n}]},
        ),
        (
            f"describe_groups: one group x {n}",
            apis_groups.DESCRIBE_GROUPS,
            lambda: {"groups": ["bounds"] * n},
        ),
        (
            f"queue_receive: partition 0 x {n}",
            apis_queues.QUEUE_RECEIVE,
            lambda: {
                "group": "bounds",
                "consumer_id": "c",
                "topics": [{"name": TOPIC, "partitions": [0] * n}],
                "max_messages": 10,
                "max_wait_ms": 0,
            },
        ),
        (
            f"queue_ack: partition 0 x {n}",
            apis_queues.QUEUE_ACK,
            lambda: {
                "group": "bounds",
                "topics": [
                    {
                        "name": TOPIC,
                        "settlements": [{**part, "action": 0, "offsets": [0], "counts": [1]}] * n,
                    }
                ],
            },
        ),
        (
            f"queue_ack: one settlement of {n} offsets",
            apis_queues.QUEUE_ACK,
            lambda: {
                "group": "bounds",
                "topics": [
                    {
                        "name": TOPIC,
                        "settlements": [
                            {
                                **part,
                                "action": 0,
                                "offsets": list(range(n)),
                                "counts": [1] * n,
                            }
                        ],
                    }
                ],
            },
        ),
        (
            f"describe_queue: partition 0 x {n}",
            apis_queues.DESCRIBE_QUEUE,
            lambda: {"group": "bounds", "topic": TOPIC, "partitions": [0] * n},
        ),
        (
            f"elect_leaders: partition 0 x {n}",
            apis_cluster.ELECT_LEADERS,
            lambda: {"topics": [{"name": TOPIC, "partitions": [0] * n}]},
        ),
        (
            f"list_partition_reassignments: partition 0 x {n}",
            apis_cluster.LIST_PARTITION_REASSIGNMENTS,
            lambda: {"topics": [{"name": TOPIC, "partitions": [0] * n}]},
        ),
    ]


def run(bootstrap: str, scale: float) -> list[tuple[str, float, int, float]]:
    """Every greedy request in turn; (label, its seconds, its error, quiet client's max wait)."""
    raw = Raw(bootstrap)
    created = {"name": TOPIC, "partitions": 1, "replication_factor": 1}
    raw.call(apis_core.CREATE_TOPICS, {"topics": [created], "timeout_ms": 30_000})
    quiet = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from benchmarks.request_bounds import _quiet; _quiet({bootstrap!r})",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    n = max(10, int(limits.MAX_PARTITIONS * scale))
    windows: list[tuple[str, float, float, int]] = []
    try:
        time.sleep(1.0)  # the quiet client is going
        for label, api, make in _requests(n):
            body = make()
            start = time.monotonic()
            try:
                _, error, _ = raw.call(api, body)
            except (ConnectionError, OSError) as exc:
                print(f"{label}: {exc}", file=sys.stderr)
                raw = Raw(bootstrap)
                error = -2
            windows.append((label, start, time.monotonic(), error))
            time.sleep(0.5)
    finally:
        quiet.terminate()
        out, _ = quiet.communicate(timeout=30)
    samples = [tuple(map(float, line.split())) for line in out.splitlines() if line.strip()]
    rows = []
    for label, start, end, error in windows:
        # a quiet request waits during the window if it was sent in it or answered in it
        waits = [lat for sent, lat in samples if sent <= end and sent + lat >= start]
        rows.append((label, end - start, error, max(waits, default=float("nan"))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="a running broker (default: start one)")
    parser.add_argument("--scale", type=float, default=1.0, help="list length / the bound")
    args = parser.parse_args()
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = BrokerProcess(Path(tempfile.mkdtemp(prefix="mq-bounds-")) / "data")
        broker.start()
        bootstrap = broker.bootstrap
    try:
        rows = run(bootstrap, args.scale)
    finally:
        if broker is not None:
            broker.stop()
    print("| request | its time s | error | quiet metadata max wait ms |")
    print("|---|---:|---:|---:|")
    for label, seconds, error, wait in rows:
        print(f"| {label} | {seconds:.2f} | {error} | {wait * 1000:.0f} |")


if __name__ == "__main__":
    main()

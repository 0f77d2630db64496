"""Wire codec benchmark: encode and decode the hot-path messages, no sockets.

Measured, in microseconds per operation (median of ``--runs`` runs, each the
mean of ``--ops`` operations):

* ``produce request``: one topic, one partition, one 64 KiB batch;
* ``fetch response``: one topic, 16 partitions, 64 KiB of records each;
* ``produce request 1 MiB``: one 1 MiB batch (the copy-count check: it should
  cost about what ``msgpack.packb`` costs).

For each: ``encode`` (body -> whole frame: :func:`~mq.wire.messages.encode_request`
or :func:`~mq.wire.messages.encode_response`), ``decode`` (frame -> validated
body: :class:`~mq.wire.frames.FrameDecoder` fed the frame, unpacking from its
buffer, then :func:`~mq.wire.messages.decode_request` /
:func:`~mq.wire.messages.decode_response`), and, as the floor the wire layer
adds to, plain ``msgpack.packb`` / ``msgpack.unpackb`` of the same payload.

Usage::

    python -m benchmarks.wire [--runs N] [--ops N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from mq.wire.apis_data import FETCH, PRODUCE, FetchResponse, ProduceRequest
from mq.wire.frames import NEED_DATA, FrameDecoder
from mq.wire.messages import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    unpack_request,
    unpack_response,
)

KiB = 1024


@dataclass
class Figure:
    message: str
    step: str
    payload_bytes: int
    us_per_op: list[float]

    @property
    def median_us(self) -> float:
        return statistics.median(self.us_per_op)


def produce_body(batch_bytes: int) -> ProduceRequest:
    records = os.urandom(batch_bytes)
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30_000,
        "topics": [{"name": "events", "partitions": [{"partition": 0, "records": records}]}],
    }


def fetch_body(partitions: int, batch_bytes: int) -> FetchResponse:
    records = memoryview(os.urandom(batch_bytes))  # as a segment read hands it out
    return {
        "topics": [
            {
                "name": "events",
                "partitions": [
                    {
                        "partition": p,
                        "error": 0,
                        "message": None,
                        "high_watermark": 1_000_000,
                        "last_stable_offset": 1_000_000,
                        "log_start_offset": 0,
                        "records": records,
                    }
                    for p in range(partitions)
                ],
            }
        ]
    }


def time_op(op: Callable[[], object], ops: int, runs: int) -> list[float]:
    """Microseconds per call of ``op``: one mean over ``ops`` calls per run."""
    op()  # warm up (schema compilation, allocator)
    results = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(ops):
            op()
        results.append((time.perf_counter() - start) / ops * 1e6)
    return results


def _feed_one(decoder: FrameDecoder[Any], frame: bytes) -> Any:
    decoder.feed(frame)
    payload = decoder.next_frame()
    assert payload is not NEED_DATA
    return payload


def measure_produce(
    label: str,
    body: ProduceRequest,
    n: int,
    add: Callable[[str, str, int, Callable[[], object], int], None],
) -> None:
    frame = encode_request(PRODUCE, 0, 1, "bench", body)
    requests = FrameDecoder(decode=unpack_request)
    envelope = [PRODUCE.key, 0, 1, "bench", body]
    add(label, "encode", len(frame), lambda: encode_request(PRODUCE, 0, 1, "bench", body), n)
    add(label, "decode", len(frame), lambda: decode_request(_feed_one(requests, frame)), n)
    add(label, "msgpack.packb", len(frame), lambda: msgpack.packb(envelope), n)
    add(label, "msgpack.unpackb", len(frame), lambda: msgpack.unpackb(frame[4:]), n)


def measure(ops: int, runs: int) -> list[Figure]:
    figures: list[Figure] = []

    def add(message: str, step: str, size: int, op: Callable[[], object], n: int) -> None:
        figures.append(Figure(message, step, size, time_op(op, n, runs)))

    for label, batch, n in (
        ("produce request 64 KiB", 64 * KiB, ops),
        ("produce request 1 MiB", 1024 * KiB, max(ops // 16, 1)),
    ):
        measure_produce(label, produce_body(batch), n, add)

    label = "fetch response 16 x 64 KiB"
    fetch = fetch_body(16, 64 * KiB)
    frame = encode_response(1, 0, fetch)
    responses = FrameDecoder(decode=unpack_response)
    n = max(ops // 16, 1)
    add(label, "encode", len(frame), lambda: encode_response(1, 0, fetch), n)
    add(
        label,
        "decode",
        len(frame),
        lambda: decode_response(_feed_one(responses, frame), FETCH, 0),
        n,
    )
    add(label, "msgpack.packb", len(frame), lambda: msgpack.packb([1, 0, fetch]), n)
    add(label, "msgpack.unpackb", len(frame), lambda: msgpack.unpackb(frame[4:]), n)
    return figures


def report(figures: list[Figure], as_json: bool, out: Callable[[str], None]) -> None:
    if as_json:
        for f in figures:
            out(
                json.dumps(
                    {
                        "message": f.message,
                        "step": f.step,
                        "payload_bytes": f.payload_bytes,
                        "median_us": round(f.median_us, 2),
                        "runs_us": [round(u, 2) for u in f.us_per_op],
                    }
                )
            )
        return
    out(f"{'message':<28} {'step':<16} {'frame bytes':>12} {'us/op':>10} {'MB/s':>9}")
    for f in figures:
        mb_s = f.payload_bytes / f.median_us
        out(
            f"{f.message:<28} {f.step:<16} {f.payload_bytes:>12,} "
            f"{f.median_us:>10.1f} {mb_s:>9,.0f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ops", type=int, default=2_000, help="operations per run (64 KiB)")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args(argv)
    report(measure(args.ops, args.runs), args.json, print)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

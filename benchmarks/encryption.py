"""Encryption at rest: W1 and W3 with ``--encryption-key-file`` as a ratio of plaintext.

Two broker processes run side by side for the whole invocation, one plain and
one with a key file (AES-256-GCM per batch, :mod:`mq.records.encryption`). Each
run does the workloads of :mod:`benchmarks.client` (W1 with ``send``, W1 with
``send_many``, W3) on both, alternating which goes first, so that load from
elsewhere on the machine falls on both alike. Every figure is a median over
``--runs``; the ratio is the median of the runs' paired ratios (encrypted over
plain msg/s: 1.0 means no cost). Usage::

    python -m benchmarks.encryption [--messages N] [--size BYTES] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import uvloop

from benchmarks.client import Figure, one_run, payloads
from benchmarks.common import Broker
from mq.storage.keyfile import add_key

VARIANTS = ("plain", "encrypted")


def measure(messages: int, size: int, runs: int) -> dict[str, list[Figure]]:
    values = payloads(messages, size)
    figures = {
        v: [
            Figure("W1 produce", messages, size),
            Figure("W1 produce send_many", messages, size),
            Figure("W3 consume", messages, size),
        ]
        for v in VARIANTS
    }
    with tempfile.TemporaryDirectory(prefix="mq-bench-crypt-") as tmp:
        keys = Path(tmp) / "keys.toml"
        add_key(keys)
        brokers = {
            "plain": Broker(Path(tmp) / "plain"),
            "encrypted": Broker(Path(tmp) / "encrypted", ["--encryption-key-file", str(keys)]),
        }
        try:
            for run in range(runs):
                order = VARIANTS if run % 2 == 0 else VARIANTS[::-1]
                for variant in order:
                    w1, w1_many, w3 = figures[variant]
                    uvloop.run(one_run(brokers[variant], run, values, w1, w1_many, w3))
        finally:
            for broker in brokers.values():
                broker.stop()
    return figures


def ratio(plain: Figure, encrypted: Figure) -> float:
    """Median of the runs' encrypted/plain msg/s ratios (run n of one against run n of other)."""
    return statistics.median(
        p.seconds / e.seconds for p, e in zip(plain.runs, encrypted.runs, strict=True)
    )


def report(figures: dict[str, list[Figure]], as_json: bool, out: Callable[[str], None]) -> None:
    rows = list(zip(figures["plain"], figures["encrypted"], strict=True))
    if as_json:
        for plain, encrypted in rows:
            out(
                json.dumps(
                    {
                        "workload": plain.workload,
                        "system": "mq",
                        "durability": "flush=interval, acks=1",
                        "messages": plain.messages,
                        "size": plain.size,
                        "plain_msg_per_s": round(plain.msg_per_s),
                        "encrypted_msg_per_s": round(encrypted.msg_per_s),
                        "ratio": round(ratio(plain, encrypted), 3),
                        "plain_broker_cpu_us_per_msg": round(plain.broker_us, 2),
                        "encrypted_broker_cpu_us_per_msg": round(encrypted.broker_us, 2),
                        "cpu_wait_pct": round(max(plain.cpu_wait_pct, encrypted.cpu_wait_pct), 1),
                        "verified": all(r.verified for f in (plain, encrypted) for r in f.runs),
                        "runs": len(plain.runs),
                    }
                )
            )
        return
    runs = len(rows[0][0].runs)
    out(f"mq, flush=interval, acks=1, loopback; encrypted at rest vs plain, median of {runs} runs")
    columns = "{:<21} {:>11} {:>11} {:>6} {:>10} {:>10} {:>8}  verified"
    out(
        columns.format(
            "workload", "plain msg/s", "enc. msg/s", "ratio", "plain µs", "enc. µs", "cpu wait"
        )
    )
    for plain, encrypted in rows:
        verified = all(r.verified for f in (plain, encrypted) for r in f.runs)
        out(
            f"{plain.workload:<21} {plain.msg_per_s:>11,.0f} {encrypted.msg_per_s:>11,.0f} "
            f"{ratio(plain, encrypted):>6.2f} "
            f"{plain.broker_us:>10.2f} {encrypted.broker_us:>10.2f} "
            f"{max(plain.cpu_wait_pct, encrypted.cpu_wait_pct):>7.0f}%  "
            f"{'yes' if verified else 'NO'}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="20,000 messages, two runs")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.runs = 20_000, 2
    figures = measure(args.messages, args.size, args.runs)
    report(figures, args.json, print)
    ok = all(r.verified for fs in figures.values() for f in fs for r in f.runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

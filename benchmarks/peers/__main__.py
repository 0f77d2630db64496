"""``python -m benchmarks.peers``: W1-W4 on Redis Streams, NATS JetStream and RabbitMQ."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from benchmarks.peers import PEERS, run_peer
from benchmarks.peers.harness import Plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__)
    parser.add_argument(
        "--peers", default=",".join(PEERS), help="comma-separated: redis,nats,rabbitmq"
    )
    parser.add_argument("--messages", type=int, default=Plan.messages)
    parser.add_argument("--runs", type=int, default=Plan.runs)
    parser.add_argument("--rate", type=int, default=Plan.rate, help="W4 msg/s")
    parser.add_argument("--seconds", type=float, default=Plan.seconds, help="W4 measured seconds")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args(argv)
    names = [n.strip().lower() for n in args.peers.split(",") if n.strip()]
    unknown = set(names) - set(PEERS)
    if unknown:
        parser.error(f"no peer {sorted(unknown)}; the peers are {', '.join(PEERS)}")
    plan = Plan(messages=args.messages, runs=args.runs, rate=args.rate, seconds=args.seconds)
    if args.quick:
        plan = Plan(messages=5_000, runs=1, rate=1_000, seconds=1.0, warmup=0.2)
    rows: list[dict[str, Any]] = []

    def out(row: dict[str, Any]) -> None:
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
        elif "skipped" in row:
            print(f"{row['system']}: skipped, {row['skipped']}", flush=True)
        else:
            print(
                f"{row['workload']:<17} {row['system']:<22} {row['durability']:<24} "
                f"{row['msg_per_s']:>9,} msg/s {row['mb_per_s']:>7.1f} MB/s "
                f"p50 {row['p50_ms'] or '':>6} p99 {row['p99_ms'] or '':>6} "
                f"server {row['broker_cpu_us_per_msg']:>6} µs client "
                f"{row['client_cpu_us_per_msg']:>6} µs "
                f"{'ok' if row['verified'] else 'NOT VERIFIED: ' + row.get('problem', '')}",
                flush=True,
            )

    for name in names:
        run_peer(name, plan, out)
    return 0 if all(row["verified"] is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

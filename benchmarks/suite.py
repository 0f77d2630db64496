"""The benchmark suite: every workload of ``BENCHMARKS.md`` in one run, one table.

``python -m benchmarks`` runs each workload's own module (``benchmarks.client``
for W1/W3, again with 1 KiB messages for W2, ``benchmarks.latency`` for W4
with ``acks=all``, ``benchmarks.replication`` for W5, ``benchmarks.queue`` for
W6, ``benchmarks.spark`` for W7) as a separate process with ``--json``, so a
workload's broker, cluster or Spark session never shares a process with the
next. Their figures are brought to the same columns (:data:`COLUMNS`) and
printed as a table, as JSON lines (``--json``) and, with ``--markdown PATH``,
as a markdown table stamped with the date, the machine and the versions.
W8 (broker CPU per message) is the ``broker µs`` column of W1 and W3.

Each module's ``--runs`` is the suite's ``--repeat``: the figures are the
medians of that many runs, as each module reports them.

``--peers`` adds Redis Streams, NATS JetStream and RabbitMQ on W1-W4
(:mod:`benchmarks.peers`, again one subprocess), in the same table; a peer
whose server is not installed is listed as skipped, with how to install it.
``--chart PATH`` draws the comparison as a PNG (:mod:`benchmarks.charts`).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]

COLUMNS: Final = (
    "workload",
    "system",
    "durability",
    "messages",
    "bytes",
    "seconds",
    "msg_per_s",
    "mb_per_s",
    "p50_ms",
    "p99_ms",
    "broker_cpu_us_per_msg",
    "verified",
)


@dataclass(frozen=True)
class Workload:
    name: str
    """W1..W7, as ``--only`` names it."""
    module: str
    args: tuple[str, ...]
    quick: tuple[str, ...]
    """Arguments for ``--quick``: small sizes that still run every step."""
    keep: Callable[[dict[str, Any]], bool]
    """Which of the module's figures belong to this workload."""
    label: str | None = None
    """A new workload name for the kept figures (W2 runs W1's code with 1 KiB)."""


def _named(*names: str) -> Callable[[dict[str, Any]], bool]:
    return lambda figure: figure.get("workload") in names


WORKLOADS: Final = (
    Workload(
        "W1",
        "benchmarks.client",
        (),
        ("--quick",),
        _named("W1 produce", "W1 produce send_many", "W3 consume"),
    ),
    Workload(
        "W2",
        "benchmarks.client",
        ("--size", "1024"),
        ("--size", "1024", "--quick"),
        _named("W1 produce", "W1 produce send_many"),
        "W2 produce 1 KiB",
    ),
    Workload(
        "W4",
        "benchmarks.latency",
        ("--acks", "all"),
        ("--acks", "all", "--rate", "500", "--seconds", "1", "--warmup", "0.2"),
        _named("W4 latency"),
    ),
    Workload(
        "W5",
        "benchmarks.replication",
        (),
        ("--messages", "5000", "--latency-seconds", "0.5", "--warmup", "0.1"),
        _named("W5 produce", "W5 ratio"),
    ),
    Workload("W6", "benchmarks.queue", (), ("--messages", "5000"), _named("W6 receive+ack")),
    Workload("W7", "benchmarks.spark", (), ("--messages", "5000"), _named("W7 spark read+count")),
)


def normalize(figure: dict[str, Any], label: str | None = None) -> dict[str, Any]:
    """A module's figure in the suite's columns (absent ones None).

    W4 reports its sending rate and latency percentiles; W5 its produce runs
    (with the acks' latency) and the RF=3 / RF=1 ratio; W7 rows/s per source,
    of which mq's is the msg/s here.
    """
    row: dict[str, Any] = {column: figure.get(column) for column in COLUMNS}
    if label is not None:  # "W1 produce send_many" run with 1 KiB: "W2 produce 1 KiB send_many"
        suffix = str(row["workload"] or "").removeprefix("W1 produce")
        row["workload"] = label + suffix
    row["system"] = row["system"] or "mq"
    if row["msg_per_s"] is None and figure.get("send_rate") is not None:
        row["msg_per_s"] = round(figure["send_rate"])
    if row["broker_cpu_us_per_msg"] is None:
        row["broker_cpu_us_per_msg"] = figure.get("broker_us")
    if row["p50_ms"] is None and figure.get("ack_p50_ms") is not None:
        row["p50_ms"], row["p99_ms"] = figure["ack_p50_ms"], figure.get("ack_p99_ms")
    if figure.get("setup"):
        row["workload"] = f"{row['workload']} {figure['setup']}"
    rows_per_s = figure.get("rows_per_s")
    if isinstance(rows_per_s, dict) and "mq" in rows_per_s:
        row["msg_per_s"] = rows_per_s["mq"]
        row["durability"] = (
            f"{figure.get('mq_vs_memory_rows_pct')} % of in-memory rows, "
            f"{figure.get('mq_vs_memory_arrow_pct')} % of in-memory Arrow"
        )
    if figure.get("workload") == "W5 ratio":
        row["durability"] = f"RF=3 acks=all / RF=1 = {figure.get('median', 0):.0%}"
        row["verified"] = not figure.get("broker_log_problems")
    return row


def _run_module(
    module: str, args: Sequence[str]
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    done = subprocess.run(
        [sys.executable, "-m", module, *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    return done, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def run_workload(workload: Workload, repeat: int | None, quick: bool) -> list[dict[str, Any]]:
    """The workload's figures (normalized); a failed module gives one row saying so."""
    args = list(workload.quick if quick else workload.args)
    if repeat is not None and not quick:
        args += ["--runs", str(repeat)]
    done, figures = _run_module(workload.module, args)
    rows = [normalize(f, workload.label) for f in figures if workload.keep(f)]
    if done.returncode != 0 or not rows:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        rows.append(
            {
                **dict.fromkeys(COLUMNS),
                "workload": workload.name,
                "system": "mq",
                "verified": False,
                "durability": f"FAILED (exit {done.returncode}): {' | '.join(tail)}",
            }
        )
    return rows


def run_peers(peers: str, repeat: int | None, quick: bool) -> list[dict[str, Any]]:
    """The peers' rows (:mod:`benchmarks.peers`), skipped ones included; a failure says so."""
    args = ["--peers", peers]
    if quick:
        args.append("--quick")
    elif repeat is not None:
        args += ["--runs", str(repeat)]
    done, rows = _run_module("benchmarks.peers", args)
    rows = [r if "skipped" in r else {c: r.get(c) for c in COLUMNS} for r in rows]
    if done.returncode != 0 and not any(r.get("verified") is False for r in rows):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        rows.append(
            {
                "workload": "peers",
                "system": peers,
                "verified": False,
                "skipped": f"FAILED (exit {done.returncode}): {' | '.join(tail)}",
            }
        )
    return rows


def skipped(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per system that did not run, with why."""
    return [f"{r['system']}: skipped, {r['skipped']}" for r in rows if "skipped" in r]


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The rows as a fixed-width text table (skipped systems as lines below it)."""
    head = ("workload", "system", "durability", "msg/s", "MB/s", "p50 ms", "p99 ms")
    form = "{:<20} {:<22} {:<34} {:>10} {:>8} {:>7} {:>7} {:>9} {:>3}"
    lines = [form.format(*head, "broker µs", "ok")]
    for r in rows:
        if "skipped" in r:
            continue
        lines.append(
            form.format(
                r["workload"],
                str(r["system"] or "mq")[:22],
                str(r["durability"] or "")[:34],
                _number(r["msg_per_s"], ","),
                _number(r["mb_per_s"], ".1f"),
                _number(r["p50_ms"], ".2f"),
                _number(r["p99_ms"], ".2f"),
                _number(r["broker_cpu_us_per_msg"], ".2f"),
                "yes" if r["verified"] else "NO",
            )
        )
    return lines + skipped(rows)


def markdown(rows: Sequence[dict[str, Any]], repeat: int | None) -> str:
    """A markdown table for the README, with the date, machine and versions."""
    out = [
        f"Measured {datetime.date.today().isoformat()} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {_versions()}; "
        f"medians of {repeat or 'the default number of'} runs per workload; "
        f"{_settings()}.",
        "",
        "| workload | system | durability | msg/s | MB/s | p50 ms | p99 ms | broker µs/msg "
        "| verified |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "skipped" in r:
            continue
        out.append(
            f"| {r['workload']} | {r['system'] or 'mq'} | {r['durability'] or ''} | "
            f"{_number(r['msg_per_s'], ',')} | "
            f"{_number(r['mb_per_s'], '.1f')} | {_number(r['p50_ms'], '.2f')} | "
            f"{_number(r['p99_ms'], '.2f')} | {_number(r['broker_cpu_us_per_msg'], '.2f')} | "
            f"{'yes' if r['verified'] else 'NO'} |"
        )
    notes = skipped(rows)
    return "\n".join(out + (["", *notes] if notes else [])) + "\n"


def _settings() -> str:
    """What changes mq's figures besides the code: its C loops and malloc's reuse."""
    from mq import allocator
    from mq.records import records

    loops = "record loops in C" if records.USE_C else "record loops in pure Python"
    reuse = "freed memory kept for reuse" if allocator.applied else "malloc's defaults"
    return f"mq's {loops}, {reuse} (mq.allocator)"


def _number(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("mq", "uvloop", "msgpack", "pyspark"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            continue
    return ", ".join(found)


def main(argv: Iterable[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--only", help="comma-separated workloads, e.g. W1,W4 (default: all)")
    parser.add_argument("--repeat", type=int, help="runs per workload; figures are medians")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that all run")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    parser.add_argument("--markdown", type=Path, help="also write a markdown table here")
    parser.add_argument(
        "--peers",
        nargs="?",
        const="redis,nats,rabbitmq",
        help="also run W1-W4 on these peers (default with no value: redis,nats,rabbitmq)",
    )
    parser.add_argument("--chart", type=Path, help="also draw the comparison as a PNG here")
    args = parser.parse_args(list(argv) if argv is not None else None)
    wanted = {w.strip().upper() for w in args.only.split(",")} if args.only else None
    unknown = (wanted or set()) - {w.name for w in WORKLOADS} - {"W3", "W8"}
    if unknown:
        parser.error(f"no workload {sorted(unknown)}; the workloads are W1-W8")
    if wanted is not None and wanted & {"W3", "W8"}:
        wanted.add("W1")  # W3 and W8 come from the W1 run
    rows: list[dict[str, Any]] = []
    for workload in WORKLOADS:
        if wanted is None or workload.name in wanted:
            got = run_workload(workload, args.repeat, args.quick)
            rows += got
            for row in got:
                if args.json:
                    print(json.dumps(row), flush=True)
    if args.peers:
        got = run_peers(args.peers, args.repeat, args.quick)
        rows += got
        if args.json:
            for row in got:
                print(json.dumps(row), flush=True)
    if not args.json:
        print("\n".join(table(rows)))
    if args.chart is not None:
        from benchmarks.charts import comparison_chart

        comparison_chart([r for r in rows if "skipped" not in r], args.chart)
    if args.markdown is not None:
        args.markdown.write_text(markdown(rows, args.repeat))
    return 0 if all(r["verified"] is not False for r in rows) else 1

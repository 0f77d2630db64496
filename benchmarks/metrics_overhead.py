"""What metrics cost: W1 and W3 with and without the HTTP listener, side by side (issue 21).

Two broker processes run at once, each with a data directory of its own: ``off``
(``mq serve``, no HTTP listener: nothing is counted) and ``on`` (``mq serve
--http-port 0``: every request, produce and fetch counted), and a scraper, a process
of its own, fetches the ``on`` broker's ``/metrics`` every second for the whole
measurement (its own CPU falls on both variants' runs; the broker's work for each
scrape on the ``on`` runs only).
The runs alternate between them (off, on, then on, off, ...), each a run of
:func:`benchmarks.client.one_run` (W1 with ``send()``, W1 with ``send_many``, W3)
on a new topic, so that load from elsewhere on a shared machine falls on both.
The report gives each variant's median msg/s, the ratio of the medians, the median
of the runs' paired ratios (run i of each variant ran back to back) and the broker's
CPU per message; the budget is a cost of at most 3 %. Usage::

    python -m benchmarks.metrics_overhead [--messages N] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import uvloop

from benchmarks.client import Figure, one_run, payloads
from benchmarks.common import Broker

BUDGET = 0.03
"""The most throughput metrics may cost (issue 21)."""
SCRAPE_INTERVAL_S = 1.0
SCRAPER = """
import sys, time, urllib.request
url, interval = sys.argv[1], float(sys.argv[2])
while True:
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()
    time.sleep(max(0.0, interval - (time.monotonic() - started)))
"""
"""A scraper in a process of its own (its CPU is not the benchmark client's)."""
VARIANTS = ("off", "on")


@contextmanager
def scraping(url: str) -> Iterator[None]:
    """Scrape ``url`` every :data:`SCRAPE_INTERVAL_S` while the block runs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRAPER, url, str(SCRAPE_INTERVAL_S)],
        stdout=subprocess.DEVNULL,
    )
    try:
        yield
        if proc.poll() is not None:
            raise RuntimeError(f"the scraper stopped (exit code {proc.returncode})")
    finally:
        proc.terminate()
        proc.wait(15)


def measure(messages: int, size: int, runs: int) -> dict[str, list[Figure]]:
    values = payloads(messages, size)
    figures = {
        v: [Figure(w, messages, size) for w in ("W1 produce", "W1 send_many", "W3 consume")]
        for v in VARIANTS
    }
    with tempfile.TemporaryDirectory(prefix="mq-bench-metrics-") as tmp:
        brokers = {
            "off": Broker(Path(tmp) / "off"),
            "on": Broker(Path(tmp) / "on", ["--http-port", "0"]),
        }
        try:
            assert brokers["on"].http_url, "the broker printed no HTTP address"
            with scraping(f"{brokers['on'].http_url}/metrics"):
                for run in range(runs):
                    order = VARIANTS if run % 2 == 0 else VARIANTS[::-1]
                    for variant in order:
                        w1, w1_many, w3 = figures[variant]
                        uvloop.run(one_run(brokers[variant], run, values, w1, w1_many, w3))
        finally:
            for broker in brokers.values():
                broker.stop()
    return figures


def paired_ratio(off: Figure, on: Figure) -> float:
    """The median of the runs' on/off throughput ratios (run i of each ran back to back)."""
    return statistics.median(a.seconds / b.seconds for a, b in zip(off.runs, on.runs, strict=True))


def report(figures: dict[str, list[Figure]], as_json: bool, out: Callable[[str], None]) -> bool:
    """Print the comparison; whether every run was verified and within the budget."""
    ok = True
    rows = []
    for off, on in zip(figures["off"], figures["on"], strict=True):
        ratio = on.msg_per_s / off.msg_per_s
        verified = all(r.verified for r in off.runs + on.runs)
        ok = ok and verified
        rows.append((off, on, ratio, paired_ratio(off, on), verified))
    if as_json:
        for off, on, ratio, paired, verified in rows:
            out(
                json.dumps(
                    {
                        "workload": off.workload,
                        "messages": off.messages,
                        "size": off.size,
                        "runs": len(off.runs),
                        "off_msg_per_s": round(off.msg_per_s),
                        "on_msg_per_s": round(on.msg_per_s),
                        "on_over_off": round(ratio, 4),
                        "on_over_off_paired": round(paired, 4),
                        "off_broker_cpu_us_per_msg": round(off.broker_us, 2),
                        "on_broker_cpu_us_per_msg": round(on.broker_us, 2),
                        "cpu_wait_pct": round((off.cpu_wait_pct + on.cpu_wait_pct) / 2, 1),
                        "verified": verified,
                    }
                )
            )
        return ok
    out(
        f"metrics off vs on (HTTP listener + a scrape every {SCRAPE_INTERVAL_S:.0f} s); "
        f"medians of {len(rows[0][0].runs)} alternating runs"
    )
    columns = "{:<14} {:>11} {:>11} {:>8} {:>8} {:>11} {:>11} {:>9}  verified"
    head = ("workload", "off msg/s", "on msg/s", "on/off", "paired", "off brk µs", "on brk µs")
    out(columns.format(*head, "cpu wait"))
    for off, on, ratio, paired, verified in rows:
        out(
            f"{off.workload:<14} {off.msg_per_s:>11,.0f} {on.msg_per_s:>11,.0f} "
            f"{ratio:>8.3f} {paired:>8.3f} {off.broker_us:>11.2f} {on.broker_us:>11.2f} "
            f"{(off.cpu_wait_pct + on.cpu_wait_pct) / 2:>8.0f}%  {'yes' if verified else 'NO'}"
        )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--runs", type=int, default=6, help="runs per variant, alternating")
    parser.add_argument("--quick", action="store_true", help="20,000 messages, 2 runs")
    parser.add_argument("--json", action="store_true", help="one JSON object per workload")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.runs = 20_000, 2
    figures = measure(args.messages, args.size, args.runs)
    return 0 if report(figures, args.json, print) else 1


if __name__ == "__main__":
    sys.exit(main())

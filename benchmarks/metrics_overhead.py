"""What metrics cost: W1 and W3 with and without the HTTP listener, side by side (issue 21).

Two broker processes run at once, each with a data directory of its own: ``off``
(``mq serve``, no HTTP listener: nothing is counted) and ``on`` (``mq serve
--http-port 0``: every request, produce and fetch counted), and a scraper, a process
of its own, fetches the ``on`` broker's ``/metrics`` every ``--scrape-interval``
seconds (default 1; 0: no scraper) for the whole measurement (its own CPU falls on
both variants' runs; the broker's work for each scrape on the ``on`` runs only).

The runs alternate between them (off, on, then on, off, ...), each W1 with
``send()``, W1 with ``send_many`` and W3 on a new topic (:mod:`benchmarks.ab`).
The report gives each variant's median msg/s and broker CPU per message, and the
medians of the runs' paired ratios (on over off) of both; the budget is a cost
of at most 3 %. ``--interleaved CHUNKS``: W1 ``send()`` only, in that many chunks of
5,000 records sent to each broker in turn, with a second broker without metrics as
the control (:func:`benchmarks.ab.interleaved`). Usage::

    python -m benchmarks.metrics_overhead [--messages N] [--runs N] [--scrape-interval S] [--json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks import ab

SCRAPE_INTERVAL_S = 1.0
"""The default scrape interval: far more often than Prometheus's usual 15 s or more, so
that a scrape's cost (a few ms of broker CPU, growing with the topics) shows."""
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


@contextmanager
def scraping(url: str, interval_s: float) -> Iterator[None]:
    """Scrape ``url`` every ``interval_s`` while the block runs (0: not at all)."""
    if not interval_s:
        yield
        return
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRAPER, url, str(interval_s)],
        stdout=subprocess.DEVNULL,
    )
    try:
        yield
        if proc.poll() is not None:
            raise RuntimeError(f"the scraper stopped (exit code {proc.returncode})")
    finally:
        proc.terminate()
        proc.wait(15)


def measure(
    messages: int, size: int, runs: int, interval_s: float, chunks: int = 0
) -> list[ab.Comparison] | ab.Interleaved:
    """The alternating runs, or with ``chunks`` the interleaved W1 with a second broker
    without metrics as the control (:mod:`benchmarks.ab`)."""
    with tempfile.TemporaryDirectory(prefix="mq-bench-metrics-") as tmp:
        variants: list[tuple[str, list[str]]] = [("off", []), ("on", ["--http-port", "0"])]
        if chunks:
            variants.append(("control", []))
        with ab.started(Path(tmp), variants) as brokers:
            off, on = brokers[0], brokers[1]
            assert on.http_url, "the broker printed no HTTP address"
            with scraping(f"{on.http_url}/metrics", interval_s):
                if chunks:
                    return ab.interleaved(off, brokers[2], on, chunks, size)
                return ab.compare(off, on, messages, size, runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ab.add_arguments(parser)
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=SCRAPE_INTERVAL_S,
        help="seconds between scrapes of the 'on' broker (0: none)",
    )
    parser.add_argument("--quick", action="store_true", help="20,000 messages, 2 runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.runs = 20_000, 2
    result = measure(args.messages, args.size, args.runs, args.scrape_interval, args.interleaved)
    extra = {"scrape_interval_s": args.scrape_interval}
    return ab.report_either(result, ("off", "on"), args.json, extra)


if __name__ == "__main__":
    sys.exit(main())

"""CLI start-up benchmark: wall time of ``mq`` commands that do no work of their own.

Each command runs as a fresh process (the installed ``mq`` console script next to
this Python, else ``python -m mq_cli.main``) ``--runs`` times; the figure is the
median wall time, start to exit. ``mq --help`` and ``mq topic --help`` should load
click and little else (the subcommands are imported on demand); ``python -c pass``
is the floor any command pays.

Usage::

    python -m benchmarks.cli_startup [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass", ["-c", "pass"]),
    ("mq --help", ["--help"]),
    ("mq topic --help", ["topic", "--help"]),
    ("mq --version", ["--version"]),
]
"""What is timed: a label and the arguments (the first is Python's own floor)."""
RUN_TIMEOUT_S = 30
"""Longest one command may take: a start-up that slow is a failure, not a figure."""


def _mq_command() -> list[str]:
    script = Path(sys.executable).with_name("mq")
    if script.exists():
        return [str(script)]
    found = shutil.which("mq")
    return [found] if found else [sys.executable, "-m", "mq_cli.main"]


def measure(runs: int) -> dict[str, float]:
    """Median wall seconds of each command over ``runs`` fresh processes."""
    mq = _mq_command()
    medians = {}
    for label, args in COMMANDS:
        argv = [sys.executable, *args] if label.startswith("python") else [*mq, *args]
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, timeout=RUN_TIMEOUT_S)
            times.append(time.perf_counter() - started)
        medians[label] = statistics.median(times)
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="one JSON object per command")
    args = parser.parse_args(argv)
    for label, seconds in measure(args.runs).items():
        if args.json:
            print(json.dumps({"command": label, "median_s": round(seconds, 4), "runs": args.runs}))
        else:
            print(f"{label:<20} {seconds * 1000:7.1f} ms  (median of {args.runs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

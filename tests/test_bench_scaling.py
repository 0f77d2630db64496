"""The scaling benchmark still runs end to end (``--quick``: tiny sizes; figures not checked).

It runs as ``python -m benchmarks.scaling`` from the repository root, as a user
would, with a broker process per curve and, for the consumers curve, its
consumer processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 60


def test_every_curve_of_the_quick_scaling_run_is_there_and_verified() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.scaling", "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    points = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    assert {p["curve"] for p in points} == {"partitions", "size", "consumers"}
    for p in points:
        assert p["verified"] is True, p
        assert p["messages"] > 0
        assert p["msg_per_s"] > 0
        assert len(p["runs"]) == 1
    produce = {(p["curve"], p["point"]) for p in points if p["phase"] == "produce"}
    consume = {(p["curve"], p["point"]) for p in points if p["phase"] == "consume"}
    assert produce == {("partitions", 1), ("partitions", 10), ("size", 100), ("size", 1024)}
    assert consume == produce | {("consumers", 1), ("consumers", 4)}

"""W7 still runs end to end (tiny sizes; its figures are not checked, its verification is)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_w7_runs_and_verifies() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.spark", "--messages", "3000", "--runs", "1", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(line)
    assert result["workload"] == "W7 spark read+count"
    assert result["verified"] is True, result["problem"]
    assert set(result["rows_per_s"]) == {"mq", "memory-arrow", "memory-rows"}

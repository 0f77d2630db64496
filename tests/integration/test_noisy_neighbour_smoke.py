"""The noisy-neighbour benchmark runs end to end (tiny sizes; figures not checked
beyond sanity): five phases with ``--floor``, every quiet message verified, A measured. The
``--overhead`` modes are run by tests/integration/test_benchmarks_smoke.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 240
"""Five phases, each a broker (two for the floor), a consumer process and (three of
them) tenant A's."""


def run(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.noisy_neighbour", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_phases_run_and_verify() -> None:
    result = run("--rate", "200", "--seconds", "1", "--ramp", "0.5", "--floor")
    phases = result["phases"]
    assert isinstance(phases, list)
    assert [p["name"] for p in phases] == [
        "B alone",
        "B + A unthrottled",
        "B + A elsewhere",
        "B + A under quota",
        "B alone",
    ]
    for phase in phases:
        assert phase["verified"] is True, phase["problem"]
    assert phases[1]["a_produce_bps"] > 0
    assert phases[2]["a_produce_bps"] > 0  # A flooded a broker of its own
    assert phases[3]["quota"] is True

"""``mq chaos run``'s wiring: options to a RunConfig, the table, the JSON, the exit code
(the campaign itself is replaced here; tests/chaos runs real ones)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import mq_cli.chaos as chaos_cli
import pytest
from click.testing import CliRunner
from mq_cli.main import main

from mq.chaos.checker import Anomalies
from mq.chaos.faults import FaultRecord
from mq.chaos.runner import RunConfig, RunResult


def _fake_campaign(seen: list[RunConfig], lost_in: set[int]) -> Callable[..., list[RunResult]]:
    def campaign(
        config: RunConfig,
        runs: int,
        log: Callable[[str], None],
        on_result: Callable[[RunResult], None],
    ) -> list[RunResult]:
        seen.append(config)
        log("a nemesis message")
        results = []
        for run in range(runs):
            result = RunResult(run, config.seed + run, config.workload, acknowledged=10)
            result.faults = [FaultRecord(2.0, "kill", 1.0, "broker 1", True, "", 0.4)]
            result.anomalies = Anomalies()
            if run in lost_in:
                result.anomalies.add("lost", "v acked at 0/1")
            on_result(result)
            results.append(result)
        return results

    return campaign


@pytest.mark.parametrize("lost_in", [set(), {1}])
def test_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, lost_in: set[int]) -> None:
    seen: list[RunConfig] = []
    monkeypatch.setattr(chaos_cli, "run_campaign", _fake_campaign(seen, lost_in))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        main,
        [
            "chaos", "run", "--runs", "3", "--seed", "40", "--workload", "log",
            "--duration", "7", "--faults", "kill,etcd", "--json", str(out),
            "--data-dir", str(tmp_path / "d"),
        ],
    )  # fmt: skip
    assert result.exit_code == (1 if lost_in else 0), result.output
    (config,) = seen
    assert (config.seed, config.workload, config.duration) == (40, "log", 7.0)
    assert config.faults == ["kill", "etcd"]
    assert config.data_dir == tmp_path / "d"
    assert "run 2 seed 42" in result.output
    document = json.loads(out.read_text())
    assert document["summary"]["runs"] == 3
    assert document["summary"]["lost"] == len(lost_in)
    assert document["summary"]["failed_seeds"] == [40 + r for r in sorted(lost_in)]
    assert [r["seed"] for r in document["runs"]] == [40, 41, 42]
    assert document["runs"][0]["faults"][0]["kind"] == "kill"


def test_unknown_fault_kinds_are_refused() -> None:
    result = CliRunner().invoke(main, ["chaos", "run", "--faults", "kill,nuke"])
    assert result.exit_code == 2
    assert "unknown fault kinds ['nuke']" in result.output

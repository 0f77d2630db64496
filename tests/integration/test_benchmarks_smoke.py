"""The client benchmarks still run end to end (tiny sizes; the figures are not checked).

Each runs as ``python -m benchmarks.<name>`` from the repository root, as a
user would, with its own broker process (and, for W4, its consumer process;
for W5, a cluster of 3 brokers and a real etcd).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60


def run_benchmark(*args: str) -> list[dict[str, Any]]:
    """The benchmark's ``--json`` lines, one object per figure."""
    done = subprocess.run(
        [sys.executable, "-m", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_w4_latency_runs_and_verifies() -> None:
    args = ("--rate", "200", "--seconds", "1", "--warmup", "0.2", "--runs", "1")
    [result] = run_benchmark("benchmarks.latency", *args)

    assert result["workload"] == "W4 latency"
    assert result["verified"] is True, result["problem"]
    assert result["messages"] == 200
    assert len(result["runs"]) == 1
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    assert result["send_rate"] > 100


def test_w1_w3_client_runs_and_verifies() -> None:
    w1, many, w3 = run_benchmark("benchmarks.client", "--messages", "2000", "--runs", "1")

    assert (w1["workload"], many["workload"], w3["workload"]) == (
        "W1 produce",
        "W1 produce send_many",
        "W3 consume",
    )
    assert w1["verified"] is True
    assert many["verified"] is True
    assert "send_many" in many["durability"]
    assert w3["verified"] is True
    assert w1["messages"] == many["messages"] == w3["messages"] == 2000


def test_w5_replication_runs_and_verifies() -> None:
    args = ("--messages", "3000", "--runs", "1", "--rate", "500")
    rf1, rf3, ratio = run_benchmark("benchmarks.replication", *args, "--latency-seconds", "0.5")

    assert (rf1["setup"], rf3["setup"]) == ("RF=1 acks=1", "RF=3 acks=all")
    for figure in (rf1, rf3):
        assert figure["workload"] == "W5 produce"
        assert figure["verified"] is True, figure["problem"]
        assert figure["messages"] == 3000
        assert figure["msg_per_s"] > 0
        assert 0 < figure["ack_p50_ms"] <= figure["ack_p99_ms"] <= figure["ack_max_ms"]
        [run] = figure["runs"]
        assert len(run["broker_cpu_s"]) == 3
    assert rf1["runs"][0]["isr"] == [rf1["runs"][0]["leader"]]
    assert sorted(rf3["runs"][0]["isr"]) == [1, 2, 3]
    assert "min.insync.replicas=2" in rf3["durability"]
    assert ratio["workload"] == "W5 ratio"
    assert ratio["median"] > 0
    assert ratio["broker_log_problems"] == []


def test_the_suite_runs_a_workload_and_reports_it_in_its_columns() -> None:
    rows = run_benchmark("benchmarks", "--only", "W1", "--quick")
    assert [r["workload"] for r in rows] == ["W1 produce", "W1 produce send_many", "W3 consume"]
    for row in rows:
        assert row["verified"] is True, row
        assert row["msg_per_s"] > 0
        assert row["broker_cpu_us_per_msg"] is not None


def test_memory_idle_and_loop_run_and_verify() -> None:
    [idle] = run_benchmark("benchmarks.memory", "idle", "--partitions", "20", "--settle", "0.2")
    assert idle["verified"] is True
    assert idle["partitions"] == 20
    assert idle["anonymous_mb"] > 0
    [loop] = run_benchmark("benchmarks.memory", "loop", "--minutes", "0.05", "--messages", "2000")
    assert loop["verified"] is True
    assert loop["rounds"] == len(loop["samples_mb"]) >= 1


def test_isolation_runs_a_pattern_between_two_solo_phases() -> None:
    args = ("--patterns", "closed_polls", "--rate", "200", "--seconds", "1", "--ramp", "0.5")
    [result] = run_benchmark("benchmarks.isolation", *args)

    phases = result["phases"]
    assert [p["pattern"] for p in phases] == ["solo", "closed_polls", "solo"]
    for phase in phases:
        assert phase["verified"] is True, phase["problem"]
        assert phase["broker_alive"] is True
        assert phase["rss_peak_mb"] > 0
        assert phase["fds_peak"] > 0
    assert result["solo_p99_ms"]["this"] > 0  # by version (--baseline-src adds one)


def test_encryption_at_rest_runs_both_variants_and_verifies() -> None:
    results = run_benchmark("benchmarks.encryption", "--messages", "2000", "--runs", "2")

    assert [r["workload"] for r in results] == ["W1 produce", "W1 produce send_many", "W3 consume"]
    assert all(r["verified"] for r in results)
    assert all(r["ratio"] > 0 and r["runs"] == 2 for r in results)


def test_metrics_overhead_runs_both_variants_and_verifies() -> None:
    rows = run_benchmark("benchmarks.metrics_overhead", "--messages", "2000", "--runs", "2")

    assert [r["workload"] for r in rows] == ["W1 produce", "W1 send_many", "W3 consume"]
    for row in rows:
        assert row["verified"] is True
        assert row["runs"] == 2
        assert row["off_msg_per_s"] > 0
        assert row["on_msg_per_s"] > 0
        assert len(row["paired_throughput_ratios"]) == len(row["paired_cpu_ratios"]) == 2
        assert row["off_broker_cpu_us_per_msg"] > 0
        assert row["on_broker_cpu_us_per_msg"] > 0


def test_quota_overhead_runs_both_variants_and_verifies() -> None:
    rows = run_benchmark(
        "benchmarks.noisy_neighbour", "--overhead", "--messages", "2000", "--runs", "2"
    )

    assert [r["workload"] for r in rows] == ["W1 produce", "W1 send_many", "W3 consume"]
    for row in rows:
        assert row["verified"] is True
        assert row["variants"] == ["none", "quotas"]
        assert len(row["paired_throughput_ratios"]) == len(row["paired_cpu_ratios"]) == 2
        assert row["none_broker_cpu_us_per_msg"] > 0
        assert row["quotas_broker_cpu_us_per_msg"] > 0


def test_security_benchmark_runs_and_verifies() -> None:
    [result] = run_benchmark("benchmarks.security", "--messages", "2000", "--runs", "2")

    assert result["verified"] is True
    for workload in ("W1", "W3"):
        assert len(result[workload]["runs_s"]["sasl_ssl"]) == 2
        assert result[workload]["ratio"] > 0


def test_interleaved_overhead_has_its_control_and_verifies() -> None:
    rows = run_benchmark("benchmarks.noisy_neighbour", "--overhead", "--interleaved", "3")

    assert [r["pair"] for r in rows] == ["quotas / none", "none' / none (control)"]
    for row in rows:
        assert row["verified"] is True
        assert row["chunks"] == 3
        assert len(row["cpu_ratio_quartiles"]) == 3


def test_interleaved_overhead_of_w3_reads_every_chunk_back() -> None:
    rows = run_benchmark(
        "benchmarks.noisy_neighbour", "--overhead", "--interleaved", "5", "--consume"
    )

    assert [r["pair"] for r in rows] == ["quotas / none", "none' / none (control)"]
    for row in rows:  # 5 chunks of 250,000 from a log of 1,000,000: read past its end once
        assert row["workload"] == "W3 consume interleaved"
        assert row["verified"] is True
        assert row["chunk_records"] == 250_000


def test_interpreter_tuning_interleaves_send_many_with_a_control() -> None:
    rows = run_benchmark(
        "benchmarks.interpreter_tuning", "--interleaved", "3", "--many", "--size", "10"
    )

    assert [r["pair"] for r in rows] == ["tuned / python", "python' / python (control)"]
    assert all(r["verified"] is True and r["chunks"] == 3 for r in rows)


def test_thread_writes_interleaves_send_many_with_a_control() -> None:
    rows = run_benchmark("benchmarks.thread_writes", "--interleaved", "2", "--many", "--size", "10")

    assert [r["pair"] for r in rows] == ["thread / loop", "loop' / loop (control)"]
    assert all(r["workload"] == "W1 send_many interleaved" for r in rows)
    assert all(r["verified"] is True and r["chunks"] == 2 for r in rows)


def test_request_layers_benchmark_times_every_variant() -> None:
    rows = run_benchmark("benchmarks.request_layers", "--requests", "500", "--rounds", "2")

    assert [r["variant"] for r in rows] == ["none", "quotas", "metrics", "both"]
    assert all(r["us_per_request"] > 0 for r in rows)
    assert rows[0]["added_us"] == 0

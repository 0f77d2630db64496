"""The benchmark charts draw PNGs from figures, including incomplete ones (no broker needed)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from benchmarks.charts import comparison_chart, main, scaling_chart

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    assert path.is_file()
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def point(curve: str, x: int, phase: str, msg_per_s: float | None) -> dict[str, Any]:
    return {
        "curve": curve,
        "point": x,
        "phase": phase,
        "messages": 1000,
        "size": 100,
        "msg_per_s": msg_per_s,
        "mb_per_s": None if msg_per_s is None else msg_per_s * 100 / 1e6,
        "broker_cpu_us_per_msg": 0.0 if x == 1 else 2.5 * x,
        "client_cpu_us_per_msg": 5.0,
        "verified": x != 10,
        "runs": [0.5, 0.6, 0.7],
    }


def row(workload: str, system: str, durability: str | None, **figures: Any) -> dict[str, Any]:
    return {"workload": workload, "system": system, "durability": durability, **figures}


def test_scaling_chart_draws_each_curve(tmp_path: Path) -> None:
    points = [
        point(curve, x, phase, 200_000 / x)
        for curve, xs in (("partitions", (1, 10, 100, 1000)), ("size", (100, 1024, 65536)))
        for x in xs
        for phase in ("produce", "consume")
    ]
    points += [point("consumers", x, "consume", 150_000.0) for x in (1, 4, 16)]
    for curve in ("partitions", "size", "consumers"):
        scaling_chart(points, curve, tmp_path / f"{curve}.png")
        assert_png(tmp_path / f"{curve}.png")


def test_scaling_chart_survives_missing_figures_and_a_single_point(tmp_path: Path) -> None:
    points = [point("size", 100, "produce", None), point("size", 100, "consume", math.nan)]
    scaling_chart(points, "size", tmp_path / "size.png")
    assert_png(tmp_path / "size.png")
    with pytest.raises(ValueError, match="no points"):
        scaling_chart(points, "partitions", tmp_path / "none.png")


def test_comparison_chart_draws_several_systems_and_ignores_the_rest(tmp_path: Path) -> None:
    mq = "flush=interval, acks=1"
    rows = [
        row("W1 produce", "mq", mq, msg_per_s=189_000, broker_cpu_us_per_msg=1.4, verified=True),
        row("W2 produce 1 KiB", "mq", mq, msg_per_s=80_000, mb_per_s=82.0, verified=True),
        row("W3 consume", "mq", mq, msg_per_s=215_000, broker_cpu_us_per_msg=0.3, verified=True),
        row("W4 latency", "mq", "flush=interval, acks=all", p50_ms=0.35, p99_ms=1.1),
        row("W5 produce RF=3 acks=all", "mq", None, msg_per_s=50_000, verified=True),
        row("W6 receive+ack", "mq", None, msg_per_s=None, verified=False),
        row("W7 spark read+count", "mq", "225 % of in-memory rows", msg_per_s=900_000),
        row("W1", "mq", "FAILED (exit 1): boom", msg_per_s=None, verified=False),
        row("W9 something new", "mq", None, msg_per_s=3),
        {"workload": None, "system": None},
        {},
    ]
    for fsync, w1, w2 in (("everysec", 54_817, 60.6), ("always", 53_350, 28.8)):
        redis = ("Redis 7.0 Streams", f"appendonly yes, appendfsync {fsync}")
        rows += [
            row("W1 produce", *redis, msg_per_s=w1, broker_cpu_us_per_msg=5.0, verified=True),
            row("W2 produce 1 KiB", *redis, msg_per_s=None, mb_per_s=w2, verified=True),
            row("W3 consume", *redis, msg_per_s=139_478, broker_cpu_us_per_msg=None),
            row("W4 latency", *redis, p50_ms=0.46, p99_ms=1.41, verified=True),
        ]
    rabbit = ("RabbitMQ 3.10 quorum queue", "publisher confirms")
    rows += [
        row("W1 produce", *rabbit, msg_per_s=5_057, broker_cpu_us_per_msg=120.0, verified=True),
        row("W3 consume", *rabbit, msg_per_s=8_138, verified=False),
        row("W4 latency", *rabbit, p50_ms=None, p99_ms=None, verified=False),
    ]
    comparison_chart(rows, tmp_path / "comparison.png", runs=3)
    assert_png(tmp_path / "comparison.png")


def test_comparison_chart_with_nothing_to_draw_still_writes_a_png(tmp_path: Path) -> None:
    rows = [row("W1 produce", "mq", None, msg_per_s=None), row("W6 receive+ack", "mq", None)]
    comparison_chart(rows, tmp_path / "empty.png")
    assert_png(tmp_path / "empty.png")


def test_the_cli_reads_json_lines(tmp_path: Path) -> None:
    points = [point("partitions", x, "produce", 1000.0 * x) for x in (1, 10)]
    (tmp_path / "points.jsonl").write_text("\n".join(json.dumps(p) for p in points) + "\n")
    rows = [row("W1 produce", "mq", "flush=interval, acks=1", msg_per_s=1000, verified=True)]
    (tmp_path / "rows.jsonl").write_text("not json\n" + json.dumps(rows[0]) + "\n")

    assert main(["scaling", str(tmp_path / "points.jsonl"), str(tmp_path / "out")]) == 0
    assert_png(tmp_path / "out" / "scaling-partitions.png")
    assert main(["comparison", str(tmp_path / "rows.jsonl"), str(tmp_path / "c.png")]) == 0
    assert_png(tmp_path / "c.png")

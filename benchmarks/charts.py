"""PNG charts of benchmark figures (matplotlib, the non-interactive Agg backend).

* :func:`scaling_chart`: one curve of :mod:`benchmarks.scaling` (its ``--json``
  points): throughput on top (produce and consume), CPU per message below.
* :func:`comparison_chart`: the suite's rows (:data:`benchmarks.suite.COLUMNS`),
  for mq and its peers: W1 msg/s, W2 MB/s, W3 msg/s, W4 p50/p99 and broker CPU
  per message for W1 and W3, one bar per system (and durability setting).
  Other workloads (W5-W7), and figures that are None, are left out.

Usage (JSON lines in, PNGs out)::

    python -m benchmarks.charts comparison ROWS.jsonl OUT.png [--runs N]
    python -m benchmarks.charts scaling POINTS.jsonl OUTDIR
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

Row = dict[str, Any]

CURVES: Final = {
    "partitions": ("How cost grows with partitions (one topic, 100 B records)", "partitions"),
    "size": ("How cost grows with record size (one partition)", "record size"),
    "consumers": ("Consuming 16 partitions with more consumer processes", "consumer processes"),
}
LOG_RANGE: Final = 30.0
"""A panel whose largest value is more than this many times its smallest gets a log scale."""
PANELS: Final = (
    ("W1 produce, 100 B", "msg/s", (("W1", "msg_per_s", ""),)),
    ("W2 produce, 1 KiB", "MB/s", (("W2", "mb_per_s", ""),)),
    ("W3 consume", "msg/s", (("W3", "msg_per_s", ""),)),
    ("W4 end-to-end latency", "ms", (("W4", "p50_ms", "p50"), ("W4", "p99_ms", "p99"))),
    (
        "Broker CPU per message",
        "µs per message",
        (
            ("W1", "broker_cpu_us_per_msg", "W1 produce"),
            ("W3", "broker_cpu_us_per_msg", "W3 consume"),
        ),
    ),
)


def number(value: Any) -> float | None:
    """A finite float, or None (for None, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def short(value: float) -> str:
    """A bar or point label: 54.8k, 1.25M, 60.6, 0.46."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            v = value / scale
            return f"{v:.{0 if v >= 100 else 1 if v >= 10 else 2}f}{suffix}"
    return f"{value:.{0 if value >= 100 else 1 if value >= 10 else 2}f}"


def _caption(fig: Figure, text: str) -> None:
    fig.text(0.01, 0.005, text, fontsize=8, color="dimgray", ha="left", va="bottom")


def _log_if_wide(ax: Axes, values: Sequence[float]) -> None:
    """A log y scale (plain tick labels) if the positive values span > LOG_RANGE x."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > LOG_RANGE:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) / 2, max(positive) * 4)
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    elif positive:
        ax.set_ylim(0, max(positive) * 1.25)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}"))


def _plot(ax: Axes, xs: list[int], ys: list[float | None], **style: Any) -> list[float]:
    """A line through the points that have a value; the values drawn."""
    ax.plot(xs, [math.nan if y is None else y for y in ys], **style)
    return [y for y in ys if y is not None]


def _point_label(curve: str, point: int) -> str:
    if curve == "size":
        return f"{point // 1024} KiB" if point >= 1024 else f"{point} B"
    return f"{point:,}"


def scaling_chart(points: Sequence[Row], curve: str, path: Path) -> None:
    """One curve's PNG: msg/s of produce and consume above, CPU µs per message below."""
    mine = [p for p in points if p.get("curve") == curve and number(p.get("point"))]
    if not mine:
        raise ValueError(f"no points of curve {curve!r}")
    title, x_name = CURVES.get(curve, (f"Scaling: {curve}", curve))
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8.5, 8.5))
    rates_drawn: list[float] = []
    cpu_drawn: list[float] = []
    # the higher of the two rates at a point is labelled above it, the other below
    best: dict[int, float] = {}
    for p in mine:
        best[p["point"]] = max(best.get(p["point"], 0.0), number(p.get("msg_per_s")) or 0.0)
    for phase, marker, color in (("produce", "o", "tab:blue"), ("consume", "s", "tab:orange")):
        rows = sorted((p for p in mine if p.get("phase") == phase), key=lambda p: p["point"])
        if not rows:
            continue
        xs = [p["point"] for p in rows]
        rates = [number(p.get("msg_per_s")) for p in rows]
        rates_drawn += _plot(top, xs, rates, marker=marker, color=color, label=phase)
        for x, rate, p in zip(xs, rates, rows, strict=True):
            mb = number(p.get("mb_per_s"))
            text = (
                ""
                if rate is None
                else short(rate) + (f", {mb:,.0f} MB/s" if mb and curve == "size" else "")
            )
            text += "" if p.get("verified", True) else " NOT VERIFIED"
            above = (rate or 0.0) >= best[x]
            top.annotate(
                text,
                (x, rate or 0),
                textcoords="offset points",
                xytext=(0, 8 if above else -10),
                ha="center",
                va="bottom" if above else "top",
                fontsize=8,
                color=color,
            )
        for key, style, who in (
            ("broker_cpu_us_per_msg", "-", "broker"),
            ("client_cpu_us_per_msg", ":", "client"),
        ):
            cpu = [number(p.get(key)) for p in rows]
            cpu = [c if c is not None and c > 0 else None for c in cpu]  # 0: below the clock tick
            if any(c is not None for c in cpu):
                cpu_drawn += _plot(
                    bottom,
                    xs,
                    cpu,
                    linestyle=style,
                    marker=marker,
                    color=color,
                    label=f"{who}, {phase}",
                )
    _log_if_wide(top, rates_drawn)
    _log_if_wide(bottom, cpu_drawn)
    top.set_title(title)
    top.set_ylabel("messages per second")
    bottom.set_title("CPU per message (user + system, from /proc and process_time)")
    bottom.set_ylabel("µs of CPU per message")
    ticks = sorted({p["point"] for p in mine})
    bottom.set_xscale("log", base=2 if curve == "consumers" else 10)
    bottom.set_xticks(ticks, [_point_label(curve, t) for t in ticks])
    bottom.xaxis.set_minor_locator(NullLocator())
    bottom.set_xlabel(f"{x_name} (log scale)")
    lo, hi = min(ticks), max(ticks)
    if hi > lo:
        pad = (hi / lo) ** 0.12  # room for the labels of the outer points
        bottom.set_xlim(lo / pad, hi * pad)
    for ax in (top, bottom):
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    runs = max((len(p.get("runs") or ()) for p in mine), default=0)
    day = datetime.date.today().isoformat()
    _caption(
        fig,
        f"mq, one broker process, loopback, acks=1, flush=interval; {day}; median of {runs} runs",
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _workload(row: Row) -> str:
    """The row's workload id (W1..W7), or ''."""
    name = row.get("workload")
    return name.split()[0] if isinstance(name, str) and name.split() else ""


def _series(rows: Sequence[Row]) -> tuple[dict[int, tuple[str, str]], dict[tuple[str, str], str]]:
    """Each row's series (system, durability or ''), and each series' legend label.

    A system is one series unless it has two durability settings for one
    workload (Redis with fsync everysec and always): then one per setting.
    """
    seen: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        seen.setdefault((str(row.get("system") or "?"), _workload(row)), set()).add(
            str(row.get("durability") or "")
        )
    split = {system for (system, _), settings in seen.items() if len(settings) > 1}
    keys: dict[int, tuple[str, str]] = {}
    settings: dict[tuple[str, str], list[str]] = {}
    for i, row in enumerate(rows):
        system, durability = str(row.get("system") or "?"), str(row.get("durability") or "")
        key = (system, durability if system in split else "")
        keys[i] = key
        if durability and durability not in settings.setdefault(key, []):
            settings[key].append(durability)
    labels = {
        key: textwrap.fill(f"{key[0]} ({' / '.join(s)})" if s else key[0], 60)
        for key, s in settings.items()
    }
    return keys, labels


def comparison_chart(rows: Sequence[Row], path: Path, *, runs: int | None = None) -> None:
    """W1-W4 and broker CPU of every system in ``rows`` (the suite's columns), as one PNG."""
    columns = {column for _, _, groups in PANELS for _, column, _ in groups}
    rows = [
        r
        for r in rows
        if _workload(r) in ("W1", "W2", "W3", "W4") and any(number(r.get(c)) for c in columns)
    ]
    keys, labels = _series(rows)
    colors = {key: plt.get_cmap("tab10")(i % 10) for i, key in enumerate(labels)}
    fig, grid = plt.subplots(2, 3, figsize=(15, 9))
    axes: list[Axes] = list(grid.flat)
    handles: dict[tuple[str, str], Any] = {}
    unverified = False
    for ax, (title, unit, groups) in zip(axes, PANELS, strict=False):
        # per series: the bars it has (group index, value, verified)
        bars: dict[tuple[str, str], list[tuple[int, float, bool]]] = {}
        for g, (workload, column, _) in enumerate(groups):
            for i, row in enumerate(rows):
                value = number(row.get(column))
                if _workload(row) == workload and value is not None:
                    got = bars.setdefault(keys[i], [])
                    if all(b[0] != g for b in got):  # the first row of a series counts
                        got.append((g, value, row.get("verified") is not False))
        ax.set_title(title)
        if not bars:
            ax.text(0.5, 0.5, "no figures", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        width = 0.8 / len(bars)
        for s, (key, got) in enumerate(bars.items()):
            xs = [g - 0.4 + width * (s + 0.5) for g, _, _ in got]
            drawn = ax.bar(xs, [v for _, v, _ in got], width, color=colors[key])
            for patch, (_, _, ok) in zip(drawn.patches, got, strict=True):
                if not ok:
                    patch.set_hatch("//")
                    unverified = True
            ax.bar_label(
                drawn,
                [short(v) for _, v, _ in got],
                fontsize=7,
                padding=2,
                rotation=90 if len(bars) > 4 else 0,
            )
            handles.setdefault(key, drawn)
        _log_if_wide(ax, [v for got in bars.values() for _, v, _ in got])
        ax.set_xticks(range(len(groups)), [label for _, _, label in groups])
        ax.set_ylabel(unit)
        ax.grid(True, axis="y", alpha=0.3)
    legend_ax = axes[-1]
    legend_ax.axis("off")
    if handles:
        legend_ax.legend(
            list(handles.values()),
            [labels[k] for k in handles],
            loc="center",
            fontsize=9,
            title="system (durability)",
            frameon=False,
        )
    fig.suptitle("mq and its peers: Python clients, broker and client on one machine (loopback)")
    median = f"median of {runs} runs" if runs else "each figure the median of its benchmark's runs"
    note = "; hatched: not verified" if unverified else ""
    _caption(
        fig,
        f"{datetime.date.today().isoformat()}; {median}; log scale where the range "
        f"is > {LOG_RANGE:.0f}x{note}",
    )
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def read_jsonl(path: Path) -> list[Row]:
    """The JSON objects of a file of JSON lines (other lines are skipped)."""
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.lstrip().startswith("{")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    kinds = parser.add_subparsers(dest="kind", required=True)
    comparison = kinds.add_parser("comparison", help="the suite's rows (JSON lines) as one PNG")
    comparison.add_argument("rows", type=Path)
    comparison.add_argument("out", type=Path)
    comparison.add_argument("--runs", type=int, help="say 'median of N runs' in the caption")
    scaling = kinds.add_parser("scaling", help="benchmarks.scaling points: one PNG per curve")
    scaling.add_argument("points", type=Path)
    scaling.add_argument("outdir", type=Path)
    args = parser.parse_args(argv)
    if args.kind == "comparison":
        comparison_chart(read_jsonl(args.rows), args.out, runs=args.runs)
        print(args.out)
        return 0
    points = read_jsonl(args.points)
    args.outdir.mkdir(parents=True, exist_ok=True)
    for curve in dict.fromkeys(p.get("curve") for p in points):
        if isinstance(curve, str):
            out = args.outdir / f"scaling-{curve}.png"
            scaling_chart(points, curve, out)
            print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

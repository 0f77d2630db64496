"""``mq chaos run``: a fault-injection campaign against a local cluster.

Each run starts a cluster (real etcd, 3 brokers on their own loopback
addresses), runs the log and/or queue workload while a seeded nemesis
injects faults, heals, and checks the history (see :mod:`mq.chaos`). Prints
one line per run and a summary table, writes every result to ``--json``,
and exits 1 if any run found an anomaly, missed a planted one, or broke.
:mod:`cli.main` loads this module only when ``mq chaos`` is used.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from mq.chaos.checker import KINDS
from mq.chaos.nemesis import KINDS as FAULT_KINDS
from mq.chaos.nemesis import parse_kinds
from mq.chaos.runner import RunConfig, RunResult, run_campaign

MAX_RUNS = 10_000
"""Runs one command does at most (each takes about duration + 15 s)."""
MAX_DURATION_S = 3_600.0
"""Longest workload phase of one run."""
DEFAULT_FAULTS = "kill,pause,leader,controller,two,etcd,partition,bitflip,truncate,disk"

COLUMNS = (
    ("runs", "runs"),
    ("faults", "faults"),
    ("acked", "acknowledged"),
    ("lost", "lost"),
    ("moved", "moved"),
    ("dup", "duplicated"),
    ("reord", "reordered"),
    ("phantom", "phantom"),
    ("q-sent", "queue_sent"),
    ("q-lost", "queue_lost"),
    ("redeliv", "redelivered_after_ack"),
    ("2-lease", "double_leases"),
    ("diverged", "diverged_replicas"),
    ("missed", "missed_plants"),
    ("heal-max-s", "heal_s"),
    ("repair-max-s", "repair_s"),
)
"""The summary table: heading and key of :func:`summary`."""


def summary(results: Sequence[RunResult]) -> dict[str, Any]:
    """Totals of a campaign (pure): counts summed, times as maxima."""
    totals: dict[str, Any] = dict.fromkeys(KINDS, 0)
    for result in results:
        for kind in KINDS:
            totals[kind] += result.anomalies.counts[kind]
    totals.update(
        runs=len(results),
        faults=sum(r.injected for r in results),
        acknowledged=sum(r.acknowledged for r in results),
        queue_sent=sum(r.queue_sent for r in results),
        missed_plants=sum(len(r.missed_plants) for r in results),
        heal_s=max((r.heal_s for r in results), default=0.0),
        repair_s=max((f.repair_s for r in results for f in r.faults), default=0.0),
        failed_runs=sum(1 for r in results if r.failed),
        failed_seeds=[r.seed for r in results if r.failed],
        problems=sum(len(r.problems) for r in results),
    )
    return totals


def table(totals: dict[str, Any]) -> str:
    """The summary as a two-line text table (pure)."""
    heads = [h for h, _ in COLUMNS]
    cells = [str(totals[key]) for _, key in COLUMNS]
    widths = [max(len(h), len(c)) for h, c in zip(heads, cells, strict=True)]
    return "\n".join(
        "  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in (heads, cells)
    )


def run_line(result: RunResult) -> str:
    """One line per run (pure)."""
    found = {k: v for k, v in result.anomalies.counts.items() if v}
    status = "FAIL" if result.failed else "ok"
    parts = [
        f"run {result.run} seed {result.seed}: {status}",
        f"{result.injected}/{len(result.faults)} faults",
        f"{result.acknowledged} acked",
        f"{result.queue_sent} queued",
        f"heal {result.heal_s:.1f} s",
        f"{result.elapsed_s:.0f} s",
    ]
    if found:
        parts.append(f"anomalies {found}")
    if result.missed_plants:
        parts.append(f"checker MISSED planted {result.missed_plants}")
    if result.problems:
        parts.append(f"problems {result.problems}")
    return ", ".join(parts)


@click.group()
def chaos() -> None:
    """Fault injection: run workloads against a local cluster under faults, check them."""


@chaos.command("run")
@click.option("--runs", type=click.IntRange(1, MAX_RUNS), default=1, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Run i uses seed S+i.")
@click.option(
    "--workload", type=click.Choice(["log", "queue", "both"]), default="both", show_default=True
)
@click.option(
    "--duration",
    type=click.FloatRange(5, MAX_DURATION_S),
    default=20.0,
    show_default=True,
    help="Seconds of workload and faults per run (healing and checking come after).",
)
@click.option(
    "--faults",
    default=DEFAULT_FAULTS,
    show_default=True,
    help=f"Comma-separated fault kinds ({', '.join(FAULT_KINDS)}), or 'all'. "
    "partition and disk need root; they are skipped with a message otherwise.",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write results here.")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=Path("mq-chaos"),
    show_default=True,
    help="Runs' directories (a clean run's is deleted, a failed run's kept with its logs).",
)
@click.option("--keep", is_flag=True, help="Keep every run's directory.")
@click.option(
    "--secure",
    is_flag=True,
    help="Brokers listen only on sasl_ssl (TLS with a throwaway CA, SCRAM users, ACLs on).",
)
def run(
    runs: int,
    seed: int,
    workload: str,
    duration: float,
    faults: str,
    json_path: Path | None,
    data_dir: Path,
    keep: bool,
    secure: bool,
) -> None:
    """Run a campaign; exit 1 if any run found an anomaly."""
    try:
        kinds = parse_kinds(faults)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--faults") from None
    config = RunConfig(
        seed=seed,
        workload=workload,
        duration=duration,
        faults=kinds,
        data_dir=data_dir,
        keep=keep,
        secure=secure,
    )
    results: list[RunResult] = []

    def done(result: RunResult) -> None:
        results.append(result)
        click.echo(run_line(result))
        if json_path is not None:
            _write(json_path, config, results)

    previous = _interrupt_on_sigterm()
    try:
        run_campaign(config, runs, log=lambda line: click.echo(line, err=True), on_result=done)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    totals = summary(results)
    click.echo(table(totals))
    if json_path is not None:
        _write(json_path, config, results)
    if totals["failed_runs"]:
        click.echo(f"{totals['failed_runs']} failed runs, seeds {totals['failed_seeds']}", err=True)
        raise SystemExit(1)


def _interrupt_on_sigterm() -> dict[int, Any]:
    """SIGTERM (and SIGINT, even when a shell started us with it ignored) interrupt the
    campaign like Ctrl-C, so that the run heals and stops its cluster, removes its
    nftables rules and unmounts its tmpfs before exiting. Returns the handlers before."""
    previous: dict[int, Any] = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    return previous


def _write(path: Path, config: RunConfig, results: list[RunResult]) -> None:
    document = {
        "config": {
            "seed": config.seed,
            "workload": config.workload,
            "duration": config.duration,
            "faults": config.faults,
            "secure": config.secure,
        },
        "summary": summary(results),
        "runs": [r.to_json() for r in results],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")

"""A/B cost of a broker feature on W1 and W3: two brokers, runs alternated, paired ratios.

What a feature costs (metrics, quotas configured but not reached: issues 20 and
21, budget 3 %) is smaller than the run-to-run spread of throughput on a shared
machine, where other processes take the CPUs at random moments. So:

* both variants run at once, each a broker process of its own (one idle while the
  other is measured), and the runs **alternate** A B, B A, A B, ... so that load
  from elsewhere falls on both;
* each run of a variant is **paired** with the other variant's run next to it,
  and the figure is the **median of the paired ratios** (B over A), which a slow
  minute shifts for one pair only;
* besides throughput, the **broker's CPU per message** is compared the same way:
  the CPU the broker process used (all its threads, from
  ``/proc/PID/task/*/schedstat``, nanoseconds) does not grow when the broker
  waits for a CPU, so it shows what the feature adds much more steadily than
  msg/s does on a loaded machine.

Each run is W1 (``send()``), W1 ``send_many`` and W3 of
:mod:`benchmarks.client` on a new topic, every record verified.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from benchmarks import client as w1w3
from benchmarks.common import Broker, cpu_pressure_seconds
from mq import Admin

BUDGET = 0.03
"""The most a feature may cost (issues 20 and 21)."""
WORKLOADS = (
    ("W1 produce", w1w3.produce),
    ("W1 send_many", w1w3.produce_many),
    ("W3 consume", w1w3.consume),
)


def broker_cpu_seconds(pid: int) -> float:
    """CPU time of a process's live threads (``schedstat``: nanoseconds, unlike the
    10 ms ticks of ``/proc/PID/stat``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


@dataclass
class Sample:
    seconds: float
    broker_cpu_s: float
    cpu_wait_s: float
    verified: bool


@dataclass
class Series:
    """One variant's runs of one workload, in order (run i pairs with the other's run i)."""

    runs: list[Sample] = field(default_factory=list)

    def median(self, pick: Callable[[Sample], float]) -> float:
        return statistics.median(pick(r) for r in self.runs)


@dataclass
class Comparison:
    workload: str
    messages: int
    a: Series = field(default_factory=Series)
    b: Series = field(default_factory=Series)

    def msg_per_s(self, series: Series) -> float:
        return series.median(lambda r: self.messages / r.seconds)

    def cpu_us(self, series: Series) -> float:
        return series.median(lambda r: r.broker_cpu_s / self.messages * 1e6)

    def paired(self, pick: Callable[[Sample], float]) -> list[float]:
        return [pick(b) / pick(a) for a, b in zip(self.a.runs, self.b.runs, strict=True)]

    @property
    def throughput_ratios(self) -> list[float]:
        """B's msg/s over A's, per pair (below 1: B is slower)."""
        return self.paired(lambda r: 1 / r.seconds)

    @property
    def cpu_ratios(self) -> list[float]:
        """B's broker CPU per message over A's, per pair (above 1: B costs more)."""
        return self.paired(lambda r: r.broker_cpu_s)

    @property
    def verified(self) -> bool:
        return all(r.verified for r in self.a.runs + self.b.runs)


async def one_run(broker: Broker, topic: str, values: list[bytes], into: Sequence[Series]) -> None:
    """W1, W1 send_many and W3 on new topics of ``broker``, each appended to ``into``."""
    async with Admin(broker.bootstrap) as admin:
        await admin.create_topic(topic, partitions=1)
        await admin.create_topic(f"{topic}-many", partitions=1)
    for series, (_, workload) in zip(into, WORKLOADS, strict=True):
        into_topic = f"{topic}-many" if workload is w1w3.produce_many else topic
        before, waited = broker_cpu_seconds(broker.proc.pid), cpu_pressure_seconds()
        seconds, _, verified = await workload(broker.bootstrap, into_topic, values)
        cpu = broker_cpu_seconds(broker.proc.pid) - before
        series.runs.append(Sample(seconds, cpu, cpu_pressure_seconds() - waited, verified))


def compare(
    a: Broker,
    b: Broker,
    messages: int,
    size: int,
    runs: int,
) -> list[Comparison]:
    """``runs`` alternating runs of each broker (A B, B A, ...): one comparison per workload."""
    values = w1w3.payloads(messages, size)
    comparisons = [Comparison(name, messages) for name, _ in WORKLOADS]
    for run in range(runs):
        order = [(a, "a"), (b, "b")]
        for broker, side in order if run % 2 == 0 else order[::-1]:
            into = [getattr(c, side) for c in comparisons]
            uvloop.run(one_run(broker, f"bench-{run}", values, into))
    return comparisons


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, mid, high = statistics.quantiles(values, n=4)
    return low, mid, high


def report(
    comparisons: list[Comparison],
    names: tuple[str, str],
    as_json: bool,
    out: Callable[[str], None],
    extra: Mapping[str, object] | None = None,
) -> bool:
    """Print the comparison (one JSON object per workload with ``as_json``); whether
    every record of every run was verified."""
    a_name, b_name = names
    if as_json:
        for c in comparisons:
            tps, cpus = c.throughput_ratios, c.cpu_ratios
            out(
                json.dumps(
                    {
                        "workload": c.workload,
                        "messages": c.messages,
                        "runs": len(c.a.runs),
                        "variants": [a_name, b_name],
                        f"{a_name}_msg_per_s": round(c.msg_per_s(c.a)),
                        f"{b_name}_msg_per_s": round(c.msg_per_s(c.b)),
                        "paired_throughput_ratio": round(statistics.median(tps), 4),
                        "paired_throughput_ratios": [round(r, 4) for r in tps],
                        f"{a_name}_broker_cpu_us_per_msg": round(c.cpu_us(c.a), 3),
                        f"{b_name}_broker_cpu_us_per_msg": round(c.cpu_us(c.b), 3),
                        "paired_cpu_ratio": round(statistics.median(cpus), 4),
                        "paired_cpu_ratios": [round(r, 4) for r in cpus],
                        "cpu_wait_pct": round(
                            statistics.median(
                                r.cpu_wait_s / r.seconds * 100 for r in c.a.runs + c.b.runs
                            ),
                            1,
                        ),
                        "verified": c.verified,
                        **(extra or {}),
                    }
                )
            )
        return all(c.verified for c in comparisons)
    out(
        f"{b_name} vs {a_name}: {len(comparisons[0].a.runs)} alternating runs each, "
        f"{comparisons[0].messages:,} messages; ratios are {b_name} over {a_name}, "
        "medians of the paired runs [quartiles]"
    )
    out(
        f"| workload | {a_name} msg/s | {b_name} msg/s | msg/s ratio | {a_name} broker "
        f"µs/msg | {b_name} broker µs/msg | broker CPU ratio | cpu wait | verified |"
    )
    out("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for c in comparisons:
        tp, cpu = quartiles(c.throughput_ratios), quartiles(c.cpu_ratios)
        wait = statistics.median(r.cpu_wait_s / r.seconds * 100 for r in c.a.runs + c.b.runs)
        out(
            f"| {c.workload} | {c.msg_per_s(c.a):,.0f} | {c.msg_per_s(c.b):,.0f} | "
            f"{tp[1]:.3f} [{tp[0]:.3f}-{tp[2]:.3f}] | {c.cpu_us(c.a):.3f} | "
            f"{c.cpu_us(c.b):.3f} | {cpu[1]:.3f} [{cpu[0]:.3f}-{cpu[2]:.3f}] | "
            f"{wait:.0f} % | {'yes' if c.verified else 'NO'} |"
        )
    return all(c.verified for c in comparisons)

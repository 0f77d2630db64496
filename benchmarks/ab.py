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

Pairs of whole runs still scatter by 10-30 % on a loaded machine. :func:`interleaved`
narrows that for W1 ``send()``: hundreds of chunks of :data:`CHUNK_RECORDS` records,
each sent to every broker in turn (tens of ms apart), with a third broker set up
like A as a control: the spread of A' over A is what the method cannot tell apart,
and B over A is read against it.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from benchmarks import client as w1w3
from benchmarks.common import Broker, cpu_pressure_seconds
from mq import Admin, Consumer, Producer, RecordFuture, TopicPartition
from mq.client.futures import SentRecords

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


# -- interleaved: W1 in small chunks, rotating over the brokers, with a control -------

CHUNK_RECORDS = 5_000
"""Records per chunk of the interleaved W1 (a few tens of ms: neighbouring chunks of
the variants see nearly the same machine)."""
MANY_CHUNK_RECORDS = 50_000
"""Records per chunk of the interleaved W1 ``send_many`` (~10x as fast: the same few
tens of ms, a handful of 256 KiB batches)."""


@dataclass
class Interleaved:
    """Per-chunk paired ratios of the interleaved W1: B over A, and A' over A (A' is a
    second broker like A: the control, what two equal brokers differ by here)."""

    chunks: int
    throughput: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    control_throughput: list[float] = field(default_factory=list)
    control_cpu: list[float] = field(default_factory=list)
    verified: bool = True
    many: bool = False
    """W1 ``send_many`` (:data:`MANY_CHUNK_RECORDS` a chunk) rather than ``send()``."""
    consume: bool = False
    """W3 (:data:`CONSUME_CHUNK_RECORDS` a chunk) rather than W1."""

    def add_chunk(self, spent: Mapping[int, tuple[float, float]]) -> None:
        """One chunk's (seconds, broker CPU seconds) of A (0), A' (1) and B (2), paired."""
        (a_s, a_cpu), (c_s, c_cpu), (b_s, b_cpu) = spent[0], spent[1], spent[2]
        self.throughput.append(a_s / b_s)
        self.cpu.append(b_cpu / a_cpu)
        self.control_throughput.append(a_s / c_s)
        self.control_cpu.append(c_cpu / a_cpu)

    @property
    def workload(self) -> str:
        if self.consume:
            return "W3 consume"
        return "W1 send_many" if self.many else "W1 send()"

    @property
    def chunk_records(self) -> int:
        if self.consume:
            return CONSUME_CHUNK_RECORDS
        return MANY_CHUNK_RECORDS if self.many else CHUNK_RECORDS


async def _interleaved(
    brokers: Sequence[Broker], chunks: int, size: int, many: bool = False
) -> Interleaved:
    """W1 ``send()`` of ``chunks`` chunks of :data:`CHUNK_RECORDS` to each broker (A, A',
    B), a chunk to each in turn, each flushed; every record's offset checked. The
    order goes through all the permutations of the brokers, so that each comes
    first, last and right after each other one equally often (a rotation alone
    put B after A' twice as often as after A). ``many``: W1 ``send_many`` instead
    (:data:`MANY_CHUNK_RECORDS` a chunk, in one call, batches of 256 KiB)."""
    records = MANY_CHUNK_RECORDS if many else CHUNK_RECORDS
    values = w1w3.payloads(records, size)
    topic = "interleaved"
    for broker in brokers:
        async with Admin(broker.bootstrap) as admin:
            await admin.create_topic(topic, partitions=1)
    out = Interleaved(chunks, many=many)
    async with contextlib.AsyncExitStack() as stack:
        batch_size = w1w3.MANY_BATCH_BYTES if many else 16_384  # the producer's default
        producers = [
            await stack.enter_async_context(Producer(b.bootstrap, acks=1, batch_size=batch_size))
            for b in brokers
        ]
        futures: list[list[RecordFuture]] = [[] for _ in brokers]
        sent: list[list[SentRecords]] = [[] for _ in brokers]
        orders = list(itertools.permutations(range(len(brokers))))
        for chunk in range(chunks):
            spent: dict[int, tuple[float, float]] = {}
            for k in orders[chunk % len(orders)]:
                pid, producer, add = brokers[k].proc.pid, producers[k], futures[k].append
                cpu, started = broker_cpu_seconds(pid), time.perf_counter()
                if many:
                    sent[k].append(await producer.send_many(topic, values))
                else:
                    for value in values:
                        add(await producer.send(topic, value))
                await producer.flush()
                spent[k] = (time.perf_counter() - started, broker_cpu_seconds(pid) - cpu)
            out.add_chunk(spent)
        expected = list(range(chunks * records))
        if many:
            offsets = [[m.offset for r in rs for m in await r] for rs in sent]
        else:
            offsets = [[f.result().offset for f in fs] for fs in futures]
    out.verified = all(got == expected for got in offsets)
    return out


async def _interleaved_consume(brokers: Sequence[Broker], chunks: int, size: int) -> Interleaved:
    """W3 in chunks: :data:`CONSUME_LOG_RECORDS` records are first produced to each
    broker (``send_many``, not measured), then one consumer per broker reads chunks
    of :data:`CONSUME_CHUNK_RECORDS` from it, a chunk from each broker in turn (in the
    order :func:`_interleaved` uses), going back to offset 0 at the end of the log;
    each record's offset and value is checked, and the time and the broker's CPU of
    each chunk paired as for W1."""
    values = w1w3.payloads(CONSUME_CHUNK_RECORDS, size)
    total = CONSUME_LOG_RECORDS
    topic = "interleaved-w3"
    tp = TopicPartition(topic, 0)
    for broker in brokers:
        async with Admin(broker.bootstrap) as admin:
            await admin.create_topic(topic, partitions=1)
        async with Producer(broker.bootstrap, acks=1, batch_size=w1w3.MANY_BATCH_BYTES) as p:
            for _ in range(total // CONSUME_CHUNK_RECORDS):
                await p.send_many(topic, values)
            await p.flush()
    out = Interleaved(chunks, consume=True)
    async with contextlib.AsyncExitStack() as stack:
        consumers = []
        for broker in brokers:
            consumer = Consumer(bootstrap=broker.bootstrap, auto_offset_reset="earliest")
            consumers.append(await stack.enter_async_context(consumer))
            consumer.assign([tp])
        read = [0] * len(brokers)
        orders = list(itertools.permutations(range(len(brokers))))
        deadline = time.monotonic() + INTERLEAVED_CONSUME_TIMEOUT_S
        for chunk in range(chunks):
            spent: dict[int, tuple[float, float]] = {}
            for k in orders[chunk % len(orders)]:
                pid, consumer, end = brokers[k].proc.pid, consumers[k], (chunk + 1) * len(values)
                cpu, started = broker_cpu_seconds(pid), time.perf_counter()
                while read[k] < end and time.monotonic() < deadline:
                    want = min(end - read[k], total - read[k] % total)
                    got = await consumer.getmany(timeout_ms=1000, max_records=want)
                    records = got.get(tp, [])
                    for record in records:
                        at = read[k] % total
                        if record.offset != at or record.value != values[at % len(values)]:
                            out.verified = False
                        read[k] += 1
                    if records and read[k] % total == 0:
                        consumer.seek(tp, 0)  # the log again, from the page cache as before
                spent[k] = (time.perf_counter() - started, broker_cpu_seconds(pid) - cpu)
            out.add_chunk(spent)
    out.verified = out.verified and read == [chunks * len(values)] * len(brokers)
    return out


CONSUME_CHUNK_RECORDS = 250_000
"""Records per chunk of the interleaved W3: ~0.1 s and ~50 ms of broker CPU, which the
kernel counts in 10 ms ticks (smaller chunks' CPU ratios were +-25 % apart)."""
CONSUME_LOG_RECORDS = 1_000_000
"""Records each broker's log holds for the interleaved W3 (read again from offset 0
at its end): ~110 MB of 100-byte records, cached, as in a W3 run."""
INTERLEAVED_CONSUME_TIMEOUT_S = 600.0
"""Bound on the whole interleaved W3 (a chunk takes tens of milliseconds)."""


def interleaved(
    a: Broker,
    control: Broker,
    b: Broker,
    chunks: int,
    size: int,
    many: bool = False,
    consume: bool = False,
) -> Interleaved:
    """See :func:`_interleaved` (``consume``: :func:`_interleaved_consume`); ``control``
    is set up like ``a``."""
    if consume:
        return uvloop.run(_interleaved_consume([a, control, b], chunks, size))
    return uvloop.run(_interleaved([a, control, b], chunks, size, many))


def report_interleaved(
    result: Interleaved, names: tuple[str, str], as_json: bool, out: Callable[[str], None]
) -> bool:
    a_name, b_name = names
    rows = (
        (f"{b_name} / {a_name}", result.throughput, result.cpu),
        (f"{a_name}' / {a_name} (control)", result.control_throughput, result.control_cpu),
    )
    if as_json:
        for label, tps, cpus in rows:
            out(
                json.dumps(
                    {
                        "workload": f"{result.workload} interleaved",
                        "pair": label,
                        "chunks": result.chunks,
                        "chunk_records": result.chunk_records,
                        "throughput_ratio_quartiles": [round(r, 4) for r in quartiles(tps)],
                        "cpu_ratio_quartiles": [round(r, 4) for r in quartiles(cpus)],
                        "verified": result.verified,
                    }
                )
            )
        return result.verified
    out(
        f"{result.workload} interleaved: {result.chunks} chunks of {result.chunk_records:,} "
        f"records {'from' if result.consume else 'to'} "
        f"each broker in turn; per-chunk paired ratios, median [quartiles]"
    )
    out("| pair | msg/s ratio | broker CPU ratio | verified |")
    out("|---|---:|---:|---|")
    for label, tps, cpus in rows:
        tp, cpu = quartiles(tps), quartiles(cpus)
        out(
            f"| {label} | {tp[1]:.3f} [{tp[0]:.3f}-{tp[2]:.3f}] | "
            f"{cpu[1]:.3f} [{cpu[0]:.3f}-{cpu[2]:.3f}] | {'yes' if result.verified else 'NO'} |"
        )
    return result.verified


def add_arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The A/B options every feature-cost benchmark takes (``prefix``: a note in their
    help, e.g. ``"--overhead: "`` where they apply to one mode only)."""
    parser.add_argument("--messages", type=int, default=200_000, help=f"{prefix}records")
    parser.add_argument("--size", type=int, default=100, help=f"{prefix}payload bytes a record")
    parser.add_argument("--runs", type=int, default=8, help=f"{prefix}runs per variant")
    parser.add_argument(
        "--interleaved",
        type=int,
        default=0,
        metavar="CHUNKS",
        help=f"{prefix}W1 only, in CHUNKS chunks rotating over the brokers, with a control",
    )
    parser.add_argument(
        "--consume", action="store_true", help=f"{prefix}with --interleaved: W3 instead of W1"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per row")


def report_either(
    result: list[Comparison] | Interleaved,
    names: tuple[str, str],
    as_json: bool,
    extra: Mapping[str, object] | None = None,
) -> int:
    """Print either kind of result; the exit code (1 if a record was not verified)."""
    if isinstance(result, Interleaved):
        return 0 if report_interleaved(result, names, as_json, print) else 1
    return 0 if report(result, names, as_json, print, extra) else 1


def config_cost(
    control_toml: str,
    names: tuple[str, str],
    messages: int,
    size: int,
    runs: int,
    chunks: int = 0,
    many: bool = False,
) -> list[Comparison] | Interleaved:
    """What a broker setting costs: brokers with ``control_toml`` (a config file that
    turns it off; ``names[0]``) and with the defaults (``names[1]``) side by side, W1/W3
    alternated (:func:`compare`), or with ``chunks``, W1 interleaved with a second
    control broker (:func:`interleaved`; ``many``: ``send_many``)."""
    with tempfile.TemporaryDirectory(prefix="mq-bench-config-") as tmp:
        config = Path(tmp) / "control.toml"
        config.write_text(control_toml)
        control = ["--config", str(config)]
        variants = [(names[0], control), (names[1], [])]
        if chunks:
            variants.append(("control", control))
        with started(Path(tmp), variants) as brokers:
            if chunks:
                return interleaved(brokers[0], brokers[2], brokers[1], chunks, size, many)
            return compare(brokers[0], brokers[1], messages, size, runs)


@contextlib.contextmanager
def started(root: Path, variants: Sequence[tuple[str, Sequence[str]]]) -> Iterator[list[Broker]]:
    """One broker per (name, ``mq serve`` arguments), each with its data under ``root``;
    all stopped on exit (those started, if one fails to start)."""
    brokers: list[Broker] = []
    try:
        for name, args in variants:
            brokers.append(Broker(root / name, args))
        yield brokers
    finally:
        for broker in brokers:
            broker.stop()

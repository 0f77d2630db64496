"""Isolation benchmark: a quiet client's latency while greedy clients run (issue 18).

For each greedy pattern of :mod:`benchmarks.greedy` (non-reading clients,
requests at their list bounds, partial frames, long polls parked on closed
sockets, a topic flood), on a fresh broker process of its own:

1. create the quiet client's topic (one partition);
2. start the pattern in a child process and let it ramp up (``--ramp`` s);
3. run W4 (:func:`benchmarks.latency.one_run`: a producer here, a consumer
   process, ``--rate`` msg/s for ``--seconds`` s after a 1 s warm-up,
   acks=all, every message checked exactly once and in order);
4. meanwhile, every 0.5 s a *fresh* connection sends ``api_versions`` and
   times the answer (a broker that cannot take a new client shows here), and
   the broker's RSS and open file descriptors are sampled every 0.2 s
   (``/proc``);
5. stop the pattern and the broker.

A solo phase (no pattern) runs first and last; the quiet client's p99 under
each pattern is reported as a ratio to the median of the two solo p99s (the
issue's goal: within 2x). If the broker's RSS passes ``--rss-limit-mb`` the
pattern is stopped at once (the machine is shared) and the phase is marked.

``--baseline-src DIR`` compares two versions of the broker in one invocation:
every phase runs twice, once with this tree's broker and once with the broker
of the source tree ``DIR`` (e.g. ``git archive`` of the commit before a
change, with an ``mq_cli`` link to its ``cli``), the two alternating which goes
first; each version's ratios are to its own solo p99s. The clients are this
tree's either way. Usage::

    python -m benchmarks.isolation [--patterns non_reading,huge_lists,...]
        [--rate 1000] [--seconds 10] [--ramp 3] [--rss-limit-mb 3072] [--json]
        [--broker-arg=--config=FILE ...] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path

import uvloop

from benchmarks import greedy
from benchmarks.common import Broker, percentile
from benchmarks.latency import Run, Settings, one_run
from mq import Admin
from mq.wire import apis_core

SAMPLE_EVERY_S = 0.2
PROBE_EVERY_S = 0.5
PROBE_TIMEOUT_S = 5.0
"""A probe unanswered this long counts as failed (and as this long in the figures)."""
PATTERN_STOP_S = 15.0
"""How long a pattern's process gets to close its sockets before it is killed."""
QUIET_TOPIC = "quiet"


@dataclass
class Phase:
    pattern: str
    code: str = "this"
    """Which broker: "this" tree's or the "baseline" (``--baseline-src``)."""
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    verified: bool = False
    problem: str = ""
    probe_p50_ms: float = float("nan")
    probe_max_ms: float = float("nan")
    probes_failed: int = 0
    probes: int = 0
    rss_peak_mb: float = 0.0
    fds_peak: int = 0
    rss_limit_hit: bool = False
    broker_alive: bool = True


@dataclass
class Monitor:
    """Samples the broker's RSS and fds, and probes it with fresh connections, in threads."""

    pid: int
    host: str
    port: int
    rss_limit_mb: float
    on_rss_limit: threading.Event
    rss_peak_mb: float = 0.0
    fds_peak: int = 0
    probe_ms: list[float] = field(default_factory=list)
    probes_failed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for target in (self._sample, self._probe):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(PROBE_TIMEOUT_S + 5)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            rss = rss_mb(self.pid)
            if rss is None:
                return  # the broker is gone
            self.rss_peak_mb = max(self.rss_peak_mb, rss)
            self.fds_peak = max(self.fds_peak, open_fds(self.pid))
            if rss > self.rss_limit_mb:
                self.on_rss_limit.set()

    def _probe(self) -> None:
        request = greedy.frame(apis_core.API_VERSIONS, {})
        while not self._stop.wait(PROBE_EVERY_S):
            start = time.monotonic()
            deadline = start + PROBE_TIMEOUT_S
            sock = greedy.connect(self.host, self.port)
            answered = False
            if sock is not None:
                try:
                    sock.sendall(request)
                    answered = greedy.read_one(sock, deadline)
                except OSError:
                    pass
                finally:
                    sock.close()
            if answered:
                self.probe_ms.append((time.monotonic() - start) * 1000)
            else:
                self.probes_failed += 1
                self.probe_ms.append(PROBE_TIMEOUT_S * 1000)


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


async def _create_quiet_topic(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(QUIET_TOPIC, partitions=1)


def run_phase(
    pattern: str | None,
    settings: Settings,
    ramp_s: float,
    rss_limit_mb: float,
    broker_args: list[str],
    source: Path | None = None,
) -> Phase:
    phase = Phase(pattern or "solo", "this" if source is None else "baseline")
    with tempfile.TemporaryDirectory(prefix="mq-isolation-") as data_dir:
        broker = Broker(Path(data_dir), broker_args, source)
        host, port = broker.bootstrap.rsplit(":", 1)
        stop = multiprocessing.get_context("spawn").Event()
        rss_hit = threading.Event()
        monitor = Monitor(broker.proc.pid, host, int(port), rss_limit_mb, rss_hit)
        child = None
        try:
            uvloop.run(_create_quiet_topic(broker.bootstrap))
            monitor.start()
            if pattern is not None:
                child = multiprocessing.get_context("spawn").Process(
                    target=greedy.PATTERNS[pattern],
                    args=(host, int(port), QUIET_TOPIC, stop),
                    name=f"mq-greedy-{pattern}",
                    daemon=True,
                )
                child.start()
                threading.Thread(target=_stop_on, args=(rss_hit, stop), daemon=True).start()
                time.sleep(ramp_s)
            try:
                run: Run = one_run(broker, QUIET_TOPIC, settings, create=False)
                phase.p50_ms, phase.p99_ms = run.p50_ms, run.p99_ms
                phase.verified, phase.problem = run.verified, run.problem
            except Exception as exc:  # the quiet client could not finish: that is the result
                phase.problem = f"the quiet client failed: {exc!r}"
        finally:
            stop.set()
            rss_hit.set()  # ends the _stop_on thread
            if child is not None:
                child.join(PATTERN_STOP_S)
                if child.is_alive():
                    child.kill()
                    child.join(5)
            monitor.stop()
            phase.broker_alive = broker.proc.poll() is None
            broker.stop()
    probes = sorted(monitor.probe_ms)
    phase.probes, phase.probes_failed = len(probes), monitor.probes_failed
    if probes:
        phase.probe_p50_ms, phase.probe_max_ms = percentile(probes, 0.5), probes[-1]
    phase.rss_peak_mb, phase.fds_peak = monitor.rss_peak_mb, monitor.fds_peak
    phase.rss_limit_hit = monitor.rss_peak_mb > rss_limit_mb
    return phase


def _stop_on(rss_hit: threading.Event, stop: ProcessEvent) -> None:
    rss_hit.wait()
    stop.set()


def report(phases: list[Phase], as_json: bool) -> None:
    solo_p99: dict[str, float] = {}
    for code in {p.code for p in phases}:
        solo = [p.p99_ms for p in phases if p.pattern == "solo" and p.verified and p.code == code]
        solo_p99[code] = statistics.median(solo) if solo else float("nan")
    if as_json:
        print(json.dumps({"solo_p99_ms": solo_p99, "phases": [asdict(p) for p in phases]}))
        return
    print(
        "| phase | code | quiet p50 ms | quiet p99 ms | p99 / solo | api_versions p50 / max ms "
        "(failed) | RSS peak MB | fds peak | verified |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for p in phases:
        solo_ms = solo_p99[p.code]
        ratio = p.p99_ms / solo_ms if solo_ms == solo_ms and solo_ms > 0 else float("nan")
        flags = " (RSS limit hit)" if p.rss_limit_hit else ""
        flags += "" if p.broker_alive else " (broker died)"
        print(
            f"| {p.pattern}{flags} | {p.code} | {p.p50_ms:.2f} | {p.p99_ms:.2f} | {ratio:.2f} | "
            f"{p.probe_p50_ms:.1f} / {p.probe_max_ms:.0f} ({p.probes_failed}/{p.probes}) | "
            f"{p.rss_peak_mb:.0f} | {p.fds_peak} | {'yes' if p.verified else 'NO'} |"
        )
    for p in phases:
        if p.problem:
            print(f"{p.pattern}: {p.problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--patterns", default=",".join(greedy.PATTERNS))
    parser.add_argument("--rate", type=int, default=1_000, help="the quiet client's msg/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured duration")
    parser.add_argument("--ramp", type=float, default=3.0, help="seconds a pattern runs first")
    parser.add_argument("--rss-limit-mb", type=float, default=3072.0)
    parser.add_argument("--broker-arg", action="append", default=[], help="passed to mq serve")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also run every phase with the broker of this source tree, alternating",
    )
    args = parser.parse_args(argv)
    patterns = [p for p in args.patterns.split(",") if p]
    unknown = set(patterns) - set(greedy.PATTERNS)
    if unknown:
        parser.error(f"unknown patterns {sorted(unknown)}; known: {sorted(greedy.PATTERNS)}")
    settings = Settings(
        rate=args.rate,
        seconds=args.seconds,
        warmup=1.0,
        size=100,
        acks="all",
        linger_ms=0.0,
        fetch_max_wait_ms=500,
    )
    sources: list[Path | None] = [None]
    if args.baseline_src is not None:
        if not (args.baseline_src / "mq").is_dir() or not (args.baseline_src / "mq_cli").exists():
            parser.error(f"{args.baseline_src} needs mq/ and an mq_cli link to its cli/")
        sources.append(args.baseline_src.resolve())
    phases: list[Phase] = []
    runs = [None, *patterns, None]
    for n, pattern in enumerate(runs):
        for source in sources if n % 2 == 0 else sources[::-1]:  # alternate who goes first
            ramp = 0 if pattern is None else args.ramp
            phases.append(
                run_phase(pattern, settings, ramp, args.rss_limit_mb, args.broker_arg, source)
            )
        if not args.json:
            print(f"# {pattern or 'solo'} done", file=sys.stderr, flush=True)
    report(phases, args.json)
    return 0 if all(p.verified for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main())

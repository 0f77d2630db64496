"""One chaos run and a campaign of runs.

A run: start a :class:`~mq.local_cluster.LocalCluster` (real etcd, 3
brokers, each on its own loopback address), create the workload topics, run
the workloads while the nemesis injects its seeded schedule, then heal
everything, wait (bounded) until every workload partition's ISR is full,
read the log back and drain the queue, stop the cluster cleanly, read every
replica's segment files, check the history, and prove the checker on copies
of the history with planted anomalies. A run's directory is deleted when it
found nothing (kept, with the brokers' logs, when it did or on ``keep``).

Not thread-safe: one campaign at a time per process (the nemesis thread is
its own and ends before the run does).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mq.chaos import netfilter, planted, replicas
from mq.chaos.checker import Anomalies, check
from mq.chaos.faults import (
    FILLER,
    DiskFault,
    FaultRecord,
    Nemesis,
    disk_unavailable_reason,
    mount_tmpfs,
    unmount,
)
from mq.chaos.history import LogHistory, QueueHistory, ReplicaImages
from mq.chaos.nemesis import schedule
from mq.chaos.netcls import NetClasses, open_classes
from mq.chaos.secured import secure
from mq.chaos.workloads import (
    CLIENT_TIMEOUT_MS,
    FINAL_READ_TIMEOUT_S,
    LogWorkload,
    QueueWorkload,
)
from mq.client import Admin, Consumer, TopicPartition
from mq.errors import MQError
from mq.local_cluster import LocalCluster

CLUSTER_SETTINGS: dict[str, int | str | float | bool] = {
    "session_timeout_ms": 2_000,
    "replica_lag_time_max_ms": 3_000,
    "replica_fetch_wait_max_ms": 200,
    "retention_check_ms": 600_000,
}
"""Short timeouts so that faults are noticed in seconds (etcd leases are whole
seconds); retention never runs during a run (it would shorten replicas)."""
HEAL_TIMEOUT_S = 60.0
"""How long a healed cluster may take until every workload partition has a leader
and its full ISR: a restart recovers in seconds; longer is a finding (reported as
not healed, and the checks still run)."""
DRAIN_TIMEOUT_S = 60.0
"""Bound on draining the queue after the heal."""
HEAL_POLL_S = 0.5
"""How often the heal looks at the ISR."""
SETTLE_S = 1.0
"""Pause after the ISR is full before the cluster stops: followers fetch what the
last produce left them (their fetch wait is 200 ms)."""
DEFAULT_HOSTS = ("127.0.5.1", "127.0.5.2", "127.0.5.3")
DEFAULT_ETCD_HOST = "127.0.5.9"
LOG_TOPIC = "chaos-log"
QUEUE_NAME = "chaos-queue"


@dataclass
class RunConfig:
    """What a campaign runs (every run the same, but for its seed)."""

    seed: int = 0
    workload: str = "both"
    duration: float = 20.0
    faults: list[str] = field(default_factory=lambda: ["kill", "pause", "leader"])
    data_dir: Path = Path("mq-chaos")
    hosts: tuple[str, ...] = DEFAULT_HOSTS
    etcd_host: str = DEFAULT_ETCD_HOST
    log_partitions: int = 3
    producers: int = 2
    queue_partitions: int = 2
    consumers: int = 3
    visibility_s: float = 5.0
    segment_bytes: int = 64 << 10
    """Small segments: a run closes several, which the damage faults need."""
    keep: bool = False
    secure: bool = False
    """Brokers listen only on ``sasl_ssl``, with SCRAM users and ACLs (:mod:`mq.chaos.secured`)."""


@dataclass
class RunResult:
    run: int
    seed: int
    workload: str
    faults: list[FaultRecord] = field(default_factory=list)
    acknowledged: int = 0
    attempted: int = 0
    queue_sent: int = 0
    queue_deliveries: int = 0
    queue_acks: int = 0
    ack_errors: dict[str, int] = field(default_factory=dict)
    """Failed ack attempts by error class (not anomalies: an ack may fail during a
    fault; one that fails although it settled the message is issue 17's point 4)."""
    anomalies: Anomalies = field(default_factory=Anomalies)
    missed_plants: list[str] = field(default_factory=list)
    healed: bool = False
    heal_s: float = 0.0
    read_complete: bool = True
    drained: bool = True
    problems: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    directory: str = ""

    @property
    def injected(self) -> int:
        return sum(1 for f in self.faults if f.injected)

    @property
    def failed(self) -> bool:
        """Anomalies, a checker that missed a planted one, or a run that broke."""
        return bool(self.anomalies.total or self.missed_plants or self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "seed": self.seed,
            "workload": self.workload,
            "faults": [f.to_json() for f in self.faults],
            "faults_injected": self.injected,
            "acknowledged": self.acknowledged,
            "attempted": self.attempted,
            "queue_sent": self.queue_sent,
            "queue_deliveries": self.queue_deliveries,
            "queue_acks": self.queue_acks,
            "ack_errors": self.ack_errors,
            "anomalies": self.anomalies.to_json(),
            "anomaly_total": self.anomalies.total,
            "missed_plants": self.missed_plants,
            "healed": self.healed,
            "heal_s": self.heal_s,
            "repair_s_max": max((f.repair_s for f in self.faults), default=0.0),
            "read_complete": self.read_complete,
            "drained": self.drained,
            "problems": self.problems,
            "elapsed_s": self.elapsed_s,
            "directory": self.directory,
        }


def run_one(config: RunConfig, run: int, log: Callable[[str], None] = print) -> RunResult:
    """One run with seed ``config.seed + run`` under ``config.data_dir/run-<run>``."""
    seed = config.seed + run
    result = RunResult(run, seed, config.workload)
    base = config.data_dir / f"run-{run}-seed-{seed}"
    if base.exists():
        shutil.rmtree(base)
    result.directory = str(base)
    began = time.monotonic()
    rng = random.Random(seed)
    disk: DiskFault | None = None
    if "disk" in config.faults:
        reason = disk_unavailable_reason()
        if reason:
            log(reason)
        else:
            node = rng.randrange(1, len(config.hosts) + 1)
            disk = DiskFault(node, base / f"node-{node}")
            try:
                mount_tmpfs(disk.path)
                disk.mounted = True
            except (OSError, subprocess.SubprocessError) as exc:
                log(f"cannot mount a tmpfs on {disk.path} ({exc}): disk faults skipped")
    classes: NetClasses | None = None
    if "partition" in config.faults:
        reason = netfilter.unavailable_reason()
        if reason:
            log(reason)
        else:
            classes = open_classes()
            if classes is None:
                log("no net_cls cgroups: partitions only make one broker unreachable")
    cluster = LocalCluster(
        base,
        len(config.hosts),
        settings=CLUSTER_SETTINGS,
        hosts=config.hosts,
        etcd_host=config.etcd_host,
        new_session=True,
    )
    prepare = secure(cluster) if config.secure else None
    topics = [t for w, t in (("log", LOG_TOPIC), ("queue", QUEUE_NAME)) if _has(config, w)]
    faults = schedule(seed, config.faults, config.duration)
    nemesis = Nemesis(cluster, faults, topics, disk, classes, log=log)
    try:
        cluster.start(prepare)
        asyncio.run(_run(config, cluster, nemesis, result, rng, log))
    except Exception as exc:
        result.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        nemesis.join()  # before the cluster stops: no fault restarts a broker after it
        with contextlib.suppress(netfilter.NetfilterError):
            nemesis.partitions.heal()
        cluster.stop()
        if classes is not None:
            classes.close()
        if disk is not None and disk.mounted:
            _release_disk(disk, keep=result.failed or config.keep)
    result.faults = nemesis.records
    result.elapsed_s = round(time.monotonic() - began, 1)
    if not result.failed and not config.keep:
        shutil.rmtree(base, ignore_errors=True)
    return result


def _release_disk(disk: DiskFault, *, keep: bool) -> None:
    """Unmount the tmpfs; with ``keep``, its contents (the filler aside) are copied to a
    plain directory in its place first, for a failed run's post-mortem."""
    (disk.path / FILLER).unlink(missing_ok=True)
    saved = disk.path.with_name(disk.path.name + ".saved")
    if keep:
        shutil.copytree(disk.path, saved, dirs_exist_ok=True)
    unmount(disk.path)
    disk.mounted = False
    if keep:
        shutil.rmtree(disk.path, ignore_errors=True)
        saved.rename(disk.path)


def _has(config: RunConfig, workload: str) -> bool:
    return config.workload in (workload, "both")


async def _run(
    config: RunConfig,
    cluster: LocalCluster,
    nemesis: Nemesis,
    result: RunResult,
    rng: random.Random,
    log: Callable[[str], None],
) -> None:
    bootstrap = cluster.bootstrap
    log_history = LogHistory() if _has(config, "log") else None
    queue_history = QueueHistory() if _has(config, "queue") else None
    log_load = queue_load = None
    if log_history is not None:
        log_load = LogWorkload(
            bootstrap,
            LOG_TOPIC,
            config.log_partitions,
            config.producers,
            log_history,
            cluster.client_security,
        )
        await log_load.create(config.segment_bytes)
    if queue_history is not None:
        queue_load = QueueWorkload(
            bootstrap,
            QUEUE_NAME,
            config.queue_partitions,
            config.consumers,
            config.visibility_s,
            queue_history,
            random.Random(rng.random()),
            cluster.client_security,
        )
        await queue_load.create()
    stop = asyncio.Event()
    loads = [w.run(stop) for w in (log_load, queue_load) if w is not None]
    tasks = [asyncio.ensure_future(load) for load in loads]
    nemesis.start(time.monotonic())
    try:
        await asyncio.sleep(config.duration)
    finally:
        stop.set()
        await asyncio.to_thread(nemesis.join)
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if task.exception() is not None:
            result.problems.append(f"workload: {task.exception()!r}")
    if nemesis.error is not None:
        result.problems.append(f"nemesis: {nemesis.error!r}")
    healing = time.monotonic()
    result.problems += await asyncio.to_thread(nemesis.heal)
    result.healed = await _wait_full_isr(cluster, [LOG_TOPIC, QUEUE_NAME])
    result.heal_s = round(time.monotonic() - healing, 2)
    if not result.healed:
        result.problems.append(f"the ISR was not full {HEAL_TIMEOUT_S:.0f} s after the heal")
    high_watermarks: dict[tuple[str, int], int] = {}
    if log_load is not None and log_history is not None:
        result.read_complete = await log_load.read_back()
        if not result.read_complete:
            result.problems.append(
                "the final read did not reach every partition's end offset in "
                f"{FINAL_READ_TIMEOUT_S:.0f} s (a reader stalled: what it missed counts as lost)"
            )
        high_watermarks |= {(LOG_TOPIC, p): hw for p, hw in log_history.end_offsets.items()}
        result.acknowledged = len(log_history.acked)
        result.attempted = len(log_history.attempted)
    if queue_load is not None and queue_history is not None:
        result.drained = await queue_load.drain(DRAIN_TIMEOUT_S)
        if not result.drained:
            result.problems.append(
                f"the queue was not drained in {DRAIN_TIMEOUT_S:.0f} s (messages stuck)"
            )
        ends = await _end_offsets(cluster, QUEUE_NAME, config.queue_partitions)
        high_watermarks |= {(QUEUE_NAME, p): hw for p, hw in ends.items()}
        result.queue_sent = len(queue_history.sent)
        result.queue_deliveries = len(queue_history.deliveries)
        result.queue_acks = sum(1 for a in queue_history.acks if a.ok)
        for attempt in queue_history.acks:
            if not attempt.ok:
                name = attempt.error.split(":", 1)[0]
                result.ack_errors[name] = result.ack_errors.get(name, 0) + 1
    await asyncio.sleep(SETTLE_S)
    await asyncio.to_thread(cluster.stop)
    images = await asyncio.to_thread(
        replicas.collect,
        {n: b.data_dir for n, b in cluster.brokers.items()},
        high_watermarks,
    )
    _check(result, log_history, queue_history, images)


def _check(
    result: RunResult,
    log_history: LogHistory | None,
    queue_history: QueueHistory | None,
    images: ReplicaImages,
) -> None:
    result.anomalies = check(log_history, queue_history, images)
    result.missed_plants = planted.prove(log_history, queue_history, images)


async def _wait_full_isr(cluster: LocalCluster, topics: list[str]) -> bool:
    deadline = time.monotonic() + HEAL_TIMEOUT_S
    security = cluster.client_security
    while time.monotonic() < deadline:
        try:
            async with Admin(
                cluster.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS, **security
            ) as admin:
                described = await admin.describe_cluster()
        except (TimeoutError, MQError, OSError):
            await asyncio.sleep(HEAL_POLL_S)
            continue
        parts = [p for t in topics for p in described.topics.get(t, [])]
        if all(p.leader > 0 and set(p.isr) == set(p.replicas) for p in parts):
            return True
        await asyncio.sleep(HEAL_POLL_S)
    return False


async def _end_offsets(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer(
        bootstrap=cluster.bootstrap, enable_auto_commit=False, **cluster.client_security
    )
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(parts)
        return {tp.partition: end for tp, end in ends.items()}
    finally:
        await consumer.stop()


def run_campaign(
    config: RunConfig,
    runs: int,
    log: Callable[[str], None] = print,
    on_result: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """``runs`` runs with seeds ``config.seed``, ``config.seed + 1``, ...; leftover nftables
    tables of dead chaos processes are removed first."""
    with contextlib.suppress(netfilter.NetfilterError, FileNotFoundError):
        if netfilter.unavailable_reason() is None:
            for name in netfilter.cleanup_stale():
                log(f"removed a leftover nftables table {name}")
    config.data_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for run in range(runs):
        result = run_one(config, run, log)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results

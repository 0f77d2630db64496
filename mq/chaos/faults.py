"""The nemesis at work: injects a schedule's faults into a local cluster, then heals.

:class:`Nemesis` runs in a thread of its own (starting a broker waits for it
to listen, which is blocking) and is the only driver of the cluster while it
runs; :meth:`Nemesis.heal` runs after that thread ended. Every fault is
undone at the end of its hold; :meth:`Nemesis.heal` undoes anything left
(resumes paused brokers, starts dead ones and etcd, removes nftables rules,
frees the full disk) also after an error or Ctrl-C.

Damage (``bitflip``, ``truncate``) is done to a stopped broker's closed
segments of the workload topics: the broker finds it when it starts (or when
its scrubber reads it), and a replica that stays damaged shows as diverged
in the check.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mq.chaos import netfilter
from mq.chaos.nemesis import ROOT_KINDS, Fault
from mq.chaos.netcls import NetClasses
from mq.client import Admin
from mq.errors import MQError
from mq.local_cluster import LocalCluster, LocalClusterError

METADATA_TIMEOUT_MS = 3_000
"""How long the nemesis waits for a broker to say who leads or controls: a fault
whose target cannot be found in this time hits a random broker instead."""
DISK_BYTES = 512 << 20
"""Size of the tmpfs of the ``disk`` fault: the broker's segments (8 MiB reserved
ahead per active segment) fit, a filler file fills it up."""
FILL_CHUNK = 1 << 20
"""Bytes the filler writes at a time until the tmpfs is full."""
MAX_FILL_CHUNKS = (DISK_BYTES // FILL_CHUNK) + 16
"""Bound on the filler's writes (a tmpfs larger than asked still ends)."""
MOUNT_TIMEOUT_S = 10.0
"""Bound on one mount or umount command."""
FILLER = "chaos-filler"
"""The file that fills the tmpfs of the ``disk`` fault."""
JOIN_TIMEOUT_S = 120.0
"""How long stopping the nemesis may wait for its thread: undoing a ``two`` fault
restarts two brokers, each bounded by :data:`RESTART_TIMEOUT_S`."""
RESTART_TIMEOUT_S = 30.0
"""How long a restarted broker may take to listen: recovering its logs after a kill
on a busy machine, with two brokers starting at once."""


@dataclass
class FaultRecord:
    """What one fault did: its schedule entry, its target, whether it was injected (or
    why not), and how long its repair took."""

    at: float
    kind: str
    hold: float
    target: str = ""
    injected: bool = False
    skipped: str = ""
    repair_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DiskFault:
    """The tmpfs data directory of one broker (set up before the cluster starts)."""

    node: int
    path: Path
    mounted: bool = False
    filled: bool = False
    """The filler may be there, and the broker was not restarted on a freed disk since:
    :meth:`Nemesis.heal` frees it and restarts the broker (its offline logs need it)."""


def disk_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "a full disk needs root (a tmpfs mount): skipped"
    if shutil.which("mount") is None:
        return "a full disk needs the mount command: skipped"
    return None


def fill(filler: Path) -> int:
    """Write zeros to ``filler`` until its file system is full (bounded); the bytes written.

    Unbuffered (nothing is left to flush at close, where a full disk would fail
    again), and a disk already full (``ENOSPC`` at the first write, or at the
    creation) is no error: it is what was wanted.
    """
    chunk = b"\0" * FILL_CHUNK
    written = 0
    try:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        return 0
    try:
        for _ in range(MAX_FILL_CHUNKS):
            try:
                written += os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return written


def mount_tmpfs(path: Path, size: int = DISK_BYTES) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "mq-chaos", str(path)],
        check=True,
        capture_output=True,
        timeout=MOUNT_TIMEOUT_S,
    )


def unmount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=False, capture_output=True, timeout=MOUNT_TIMEOUT_S)


@dataclass
class Nemesis:
    """Injects ``faults`` into ``cluster``; ``topics`` are the workload topics (their
    leaders and segments are targets)."""

    cluster: LocalCluster
    faults: list[Fault]
    topics: list[str]
    disk: DiskFault | None = None
    classes: NetClasses | None = None
    """Net_cls classes for true partitions (None: partitions only make one broker
    unreachable)."""
    records: list[FaultRecord] = field(default_factory=list)
    partitions: netfilter.Partitions = field(default_factory=netfilter.Partitions)
    stop_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    """The thread running :meth:`run` (see :meth:`start`)."""
    error: BaseException | None = None
    log: Callable[[str], None] = lambda line: None

    # -- the schedule ---------------------------------------------------------------------

    def start(self, started: float) -> None:
        """Run :meth:`run` in a thread of its own."""
        self.thread = threading.Thread(target=self.run, args=(started,), daemon=True)
        self.thread.start()

    def join(self) -> None:
        """Stop (the current fault is undone at once) and wait for the thread (bounded:
        an undo restarts brokers, which is bounded too)."""
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(JOIN_TIMEOUT_S)

    def run(self, started: float) -> None:
        """Inject each fault at its time (``started`` is the workloads' monotonic start),
        hold it, undo it; stops early when :attr:`stop_event` is set. Thread body."""
        try:
            for fault in self.faults:
                if self.stop_event.wait(max(0.0, started + fault.at - time.monotonic())):
                    return
                record = FaultRecord(fault.at, fault.kind, fault.hold)
                self.records.append(record)
                self._one(fault, record)
        except BaseException as exc:  # reported by the runner, which heals
            self.error = exc

    def _one(self, fault: Fault, record: FaultRecord) -> None:
        rng = random.Random(fault.pick)
        reason = self._unavailable(fault.kind)
        if reason:
            record.skipped = reason
            return
        injectors: dict[str, Callable[[random.Random, FaultRecord], Callable[[], None] | None]] = {
            "kill": self._kill,
            "pause": self._pause,
            "leader": self._leader_kill,
            "controller": self._controller_kill,
            "two": self._two,
            "etcd": self._etcd,
            "partition": self._partition,
            "bitflip": self._bitflip,
            "truncate": self._truncate,
            "disk": self._disk,
        }
        undo = injectors[fault.kind](rng, record)
        if undo is None:
            return
        record.injected = True
        self.log(f"fault {fault.kind} {record.target} for {fault.hold:.1f} s")
        self.stop_event.wait(fault.hold)
        began = time.monotonic()
        undo()
        record.repair_s = round(time.monotonic() - began, 3)

    def _unavailable(self, kind: str) -> str | None:
        if kind == "partition":
            return netfilter.unavailable_reason()
        if kind == "disk" and (self.disk is None or not self.disk.mounted):
            return disk_unavailable_reason() or "no tmpfs data directory was set up"
        if kind in ROOT_KINDS and os.geteuid() != 0:
            return f"{kind} needs root: skipped"
        return None

    # -- targets --------------------------------------------------------------------------

    def _live(self) -> list[int]:
        return [n for n, b in sorted(self.cluster.brokers.items()) if b.alive and not b.paused]

    def _describe(self, what: Callable[[Admin], Any]) -> Any:
        live = self._live()
        if not live:
            return None
        bootstrap = ",".join(self.cluster.brokers[n].bootstrap for n in live)

        async def ask() -> Any:
            security = self.cluster.client_security
            async with Admin(
                bootstrap, request_timeout_ms=METADATA_TIMEOUT_MS, **security
            ) as admin:
                return await asyncio.wait_for(what(admin), METADATA_TIMEOUT_MS / 1000)

        try:
            return asyncio.run(ask())
        except (TimeoutError, MQError, OSError):
            return None

    def _leader(self, rng: random.Random) -> int | None:
        topic = rng.choice(self.topics)

        async def leaders(admin: Admin) -> list[int]:
            description = await admin.describe_topic(topic)
            return [p.leader for p in description.partitions if p.leader > 0]

        found = self._describe(leaders)
        return rng.choice(found) if found else None

    def _controller(self) -> int | None:
        async def controller(admin: Admin) -> int:
            return (await admin.describe_cluster()).controller_id

        found = self._describe(controller)
        return found if isinstance(found, int) and found > 0 else None

    def _any(self, rng: random.Random) -> int:
        return rng.choice(sorted(self.cluster.brokers))

    # -- the faults (each returns its undo, or None when it did nothing) -------------------

    def _kill_node(self, node: int, record: FaultRecord) -> Callable[[], None]:
        record.target = f"broker {node}"
        self.cluster.kill(node)
        return lambda: self._start(node)

    def _start(self, node: int) -> None:
        broker = self.cluster.brokers[node]
        if not broker.alive:
            broker.start()

    def _kill(self, rng: random.Random, record: FaultRecord) -> Callable[[], None]:
        return self._kill_node(self._any(rng), record)

    def _leader_kill(self, rng: random.Random, record: FaultRecord) -> Callable[[], None]:
        node = self._leader(rng)
        if node is None:
            node = self._any(rng)
            record.skipped = "no leader known: a random broker instead"
        return self._kill_node(node, record)

    def _controller_kill(self, rng: random.Random, record: FaultRecord) -> Callable[[], None]:
        node = self._controller()
        if node is None:
            node = self._any(rng)
            record.skipped = "no controller known: a random broker instead"
        return self._kill_node(node, record)

    def _two(self, rng: random.Random, record: FaultRecord) -> Callable[[], None]:
        nodes = sorted(rng.sample(sorted(self.cluster.brokers), 2))
        record.target = f"brokers {nodes}"
        for node in nodes:
            self.cluster.kill(node)

        def undo() -> None:
            for node in nodes:
                self.cluster.brokers[node].launch()
            for node in nodes:
                self.cluster.brokers[node].wait_listening(RESTART_TIMEOUT_S)

        return undo

    def _pause(self, rng: random.Random, record: FaultRecord) -> Callable[[], None]:
        node = self._any(rng)
        record.target = f"broker {node}"
        self.cluster.pause(node)
        return lambda: self.cluster.resume(node)

    def _etcd(self, rng: random.Random, record: FaultRecord) -> Callable[[], None]:
        record.target = "etcd"
        self.cluster.etcd.kill()
        return self.cluster.etcd.start

    def _partition(self, rng: random.Random, record: FaultRecord) -> Callable[[], None]:
        nodes = sorted(self.cluster.brokers)
        node = rng.choice(nodes)
        if self.classes is None:  # no net_cls: only "nobody reaches this broker"
            broker = self.cluster.brokers[node]
            record.target = f"broker {node} ({broker.host}:{broker.port}) unreachable"
            self.partitions.isolate(broker.host, broker.port)
            return self.partitions.heal
        others = [n for n in nodes if n != node]
        shape = rng.choice(["isolated", "bridge", "with-etcd"])
        side_a: list[str] = [f"broker {node}"]
        side_b: list[str] = [f"broker {n}" for n in others] + ["etcd"]
        if shape == "bridge":  # two brokers cannot talk; both reach etcd and the third
            side_b = [f"broker {rng.choice(others)}"]
        elif shape == "with-etcd":  # a minority that keeps etcd
            side_a, side_b = [f"broker {node}", "etcd"], [f"broker {n}" for n in others]
        record.target = f"{' + '.join(side_a)} | {' + '.join(side_b)}"
        self.partitions.split(self._classed(side_a), self._classed(side_b))
        return self.partitions.heal

    def _classed(self, members: list[str]) -> list[tuple[int, str]]:
        """Each member's (net_cls class id, address), its process moved into its class."""
        assert self.classes is not None
        out = []
        for member in members:
            if member == "etcd":
                process, host = self.cluster.etcd.proc, self.cluster.etcd.host
            else:
                broker = self.cluster.brokers[int(member.split()[1])]
                process, host = broker.proc, broker.host
            if process is None or process.poll() is not None:
                continue  # not running: nothing to cut off
            out.append((self.classes.move(member.replace(" ", "-"), process.pid), host))
        return out

    def _damage(
        self, rng: random.Random, record: FaultRecord, how: str
    ) -> Callable[[], None] | None:
        node = self._any(rng)
        broker = self.cluster.brokers[node]
        closed: list[Path] = []
        for topic in self.topics:
            for directory in sorted(broker.data_dir.glob(f"{topic}-*")):
                segments = sorted(directory.glob("*.log"))
                closed += segments[:-1]  # the last one is active
        if not closed:
            record.skipped = f"broker {node} has no closed segment yet"
            return None
        segment = rng.choice(closed)
        self.cluster.kill(node)
        size = segment.stat().st_size
        if size == 0:
            record.skipped = f"{segment} is empty"
            return lambda: self._start(node)
        if how == "bitflip":
            pos, bit = rng.randrange(size), rng.randrange(8)
            with segment.open("r+b") as f:
                f.seek(pos)
                byte = f.read(1)[0]
                f.seek(pos)
                f.write(bytes([byte ^ (1 << bit)]))
            record.target = f"broker {node}: {segment} byte {pos} bit {bit}"
        else:
            cut = rng.randrange(1, size)
            os.truncate(segment, cut)
            record.target = f"broker {node}: {segment} cut from {size} to {cut} bytes"
        return lambda: self._start(node)

    def _bitflip(self, rng: random.Random, record: FaultRecord) -> Callable[[], None] | None:
        return self._damage(rng, record, "bitflip")

    def _truncate(self, rng: random.Random, record: FaultRecord) -> Callable[[], None] | None:
        return self._damage(rng, record, "truncate")

    def _disk(self, rng: random.Random, record: FaultRecord) -> Callable[[], None]:
        assert self.disk is not None
        disk = self.disk
        record.target = f"broker {disk.node}: {disk.path} full"
        disk.filled = True  # from here on, heal() frees it whatever happens
        fill(disk.path / FILLER)

        def undo() -> None:
            self._free_disk(disk)

        return undo

    def _free_disk(self, disk: DiskFault) -> None:
        """Remove the filler and restart the broker (dead or alive): a failed write is
        sticky, its logs come back online only when it starts again on a disk with room."""
        (disk.path / FILLER).unlink(missing_ok=True)
        self.cluster.kill(disk.node)
        self._start(disk.node)
        disk.filled = False

    # -- healing --------------------------------------------------------------------------

    def heal(self) -> list[str]:
        """Undo everything left: resume, restart, remove rules, free the disk. Returns
        what failed (empty: all healed)."""
        problems: list[str] = []
        try:
            self.partitions.heal()
        except netfilter.NetfilterError as exc:
            problems.append(str(exc))
        if self.disk is not None and self.disk.mounted:
            (self.disk.path / FILLER).unlink(missing_ok=True)
            if self.disk.filled:  # its undo did not run (or failed): restart it below
                self.cluster.kill(self.disk.node)
                self.disk.filled = False
        if not self.cluster.etcd.alive:
            try:
                self.cluster.etcd.start()
            except LocalClusterError as exc:
                problems.append(str(exc))
        launched = []
        for node, broker in sorted(self.cluster.brokers.items()):
            if broker.paused:
                broker.resume()
            if not broker.alive:
                broker.launch()
                launched.append(node)
        for node in launched:
            try:
                self.cluster.brokers[node].wait_listening(RESTART_TIMEOUT_S)
            except LocalClusterError as exc:
                problems.append(f"broker {node}: {exc}")
        return problems

"""Which process sent a packet: a net_cls cgroup (and class id) per cluster process.

On loopback every outgoing connection has the source address 127.0.0.1,
whatever address its process listens on, so an nftables rule cannot tell a
broker's packets from another's by address. A net_cls cgroup can: each
process moved into one gets its class id on all its sockets (those it has
already, too), and nftables matches it (``meta cgroup``). That makes a true
partition between two processes: drop the packets of class X to the address
of Y and those of class Y to the address of X; the clients (class 0) still
reach everyone.

:class:`NetClasses` mounts the cgroup-v1 ``net_cls`` hierarchy at a private
mount point (or uses one already mounted), makes cgroups named
``mq_chaos_<pid>_<name>`` and removes them (and unmounts) on :meth:`close`.
Root only; where there is no ``net_cls`` (a cgroup-v2-only kernel)
:func:`open_classes` returns None and partitions fall back to dropping
packets to one address. Not thread-safe: one nemesis drives it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path

from mq.chaos.netfilter import TABLE_PREFIX, alive

MOUNT_TIMEOUT_S = 10.0
"""Bound on one mount or umount command."""
MAX_CLASSES = 0xFFFF
"""Class ids one run makes at most (the minor number is 16 bits)."""


def _existing_mount() -> Path | None:
    with open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 3 and fields[2] == "cgroup" and "net_cls" in fields[3].split(","):
                return Path(fields[1])
    return None


class NetClasses:
    """Net_cls cgroups of one run's processes."""

    def __init__(self, root: Path, mounted_here: Path | None) -> None:
        self.root = root
        self._mounted_here = mounted_here
        self.classes: dict[str, int] = {}

    def classid(self, name: str) -> int:
        """The class id of ``name``'s cgroup (made on first use)."""
        if name not in self.classes:
            minor = len(self.classes) + 1
            if minor > MAX_CLASSES:
                raise ValueError(f"more than {MAX_CLASSES} net_cls classes")
            path = self._path(name)
            path.mkdir(exist_ok=True)
            # major: this process (two campaigns at once do not share ids), minor: the slot
            classid = ((os.getpid() & 0xFFFF) << 16) | minor
            (path / "net_cls.classid").write_text(f"{classid}\n")
            self.classes[name] = classid
        return self.classes[name]

    def _path(self, name: str) -> Path:
        return self.root / f"{TABLE_PREFIX}{os.getpid()}_{name}"

    def move(self, name: str, pid: int) -> int:
        """Put process ``pid`` (all its threads and sockets) in ``name``'s class."""
        classid = self.classid(name)
        (self._path(name) / "cgroup.procs").write_text(f"{pid}\n")
        return classid

    def release(self, pid: int) -> None:
        """Back to the root cgroup (no class)."""
        with contextlib.suppress(OSError):
            (self.root / "cgroup.procs").write_text(f"{pid}\n")

    def close(self) -> None:
        """Remove the cgroups (their processes go back to the root) and unmount."""
        for name in list(self.classes):
            path = self._path(name)
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    self.release(int(pid))
            with contextlib.suppress(OSError):
                path.rmdir()
        self.classes.clear()
        if self._mounted_here is not None:
            subprocess.run(
                ["umount", str(self._mounted_here)],
                check=False,
                capture_output=True,
                timeout=MOUNT_TIMEOUT_S,
            )
            with contextlib.suppress(OSError):
                self._mounted_here.rmdir()
            self._mounted_here = None


def _remove_stale(root: Path) -> None:
    """Remove the (empty) cgroups of chaos processes that no longer run."""
    for path in root.glob(f"{TABLE_PREFIX}*"):
        pid_text = path.name.removeprefix(TABLE_PREFIX).split("_")[0]
        if pid_text.isdigit() and not alive(int(pid_text)):
            with contextlib.suppress(OSError):
                path.rmdir()


def open_classes() -> NetClasses | None:
    """The net_cls hierarchy (mounted at a private point if it is not mounted yet); None
    when this machine has none (not root, or a cgroup-v2-only kernel)."""
    if os.geteuid() != 0:
        return None
    existing = _existing_mount()
    if existing is not None:
        _remove_stale(existing)
        return NetClasses(existing, None)
    point = Path(tempfile.mkdtemp(prefix="mq-chaos-net-cls-"))
    try:
        done = subprocess.run(
            ["mount", "-t", "cgroup", "-o", "net_cls", "mq_chaos_net_cls", str(point)],
            check=False,
            capture_output=True,
            timeout=MOUNT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        point.rmdir()
        return None
    if done.returncode != 0:
        point.rmdir()
        return None
    _remove_stale(point)
    return NetClasses(point, point)

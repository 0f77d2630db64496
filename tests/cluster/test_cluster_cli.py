"""``mq cluster up`` and ``mq cluster status`` as real processes, with a real etcd.

``mq cluster up --nodes 3`` runs on a tmp data directory; once it prints its
bootstrap line, ``mq cluster status --json`` must see three brokers and a
controller; SIGINT must then stop every process ``up`` started (etcd and the
brokers, which run in sessions of their own, so nothing but ``up`` stops them).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

UP_TIMEOUT_S = 60.0
"""etcd and three Python brokers starting at once on a busy 2-core machine."""
CONTROLLER_TIMEOUT_S = 30.0
"""Registrations and a controller election after the brokers listen."""
DOWN_TIMEOUT_S = 30.0
"""SIGTERM to three brokers (each allowed 10 s before SIGKILL), then etcd."""
STATUS_TIMEOUT_S = 30.0
_BOOTSTRAP = re.compile(r"^mq cluster up: bootstrap (\S+)$")


def _mq(*args: str) -> list[str]:
    return [sys.executable, "-m", "mq_cli.main", *args]


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            found.add(int(entry.name))
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _read_lines(stream: Any, lines: queue.Queue[str | None]) -> None:
    with stream:
        for raw in stream:
            lines.put(raw.decode(errors="replace").rstrip("\n"))
    lines.put(None)


def _status(bootstrap: str) -> dict[str, Any]:
    done = subprocess.run(
        _mq("cluster", "status", "--bootstrap", bootstrap, "--json"),
        capture_output=True,
        timeout=STATUS_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.mark.slow
def test_cluster_up_status_and_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    errors = tmp_path / "up.stderr"
    with errors.open("wb") as err:
        up = subprocess.Popen(
            _mq("cluster", "up", "--nodes", "3", "--data-dir", str(data)),
            stdout=subprocess.PIPE,
            stderr=err,
        )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read_lines, args=(up.stdout, lines), daemon=True).start()
    seen: list[str] = []
    children: set[int] = set()
    try:
        bootstrap = None
        deadline = time.monotonic() + UP_TIMEOUT_S
        while bootstrap is None:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no bootstrap line: {seen} {errors.read_text()[-3000:]}"
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            assert line is not None, f"`up` exited: {seen} {errors.read_text()[-3000:]}"
            seen.append(line)
            if found := _BOOTSTRAP.match(line):
                bootstrap = found.group(1)
        assert len(bootstrap.split(",")) == 3
        children = _children(up.pid)
        assert len(children) == 4, children  # etcd and three brokers
        assert all(_running(pid) for pid in children)
        assert (data / "etcd").is_dir()
        assert all((data / f"node-{n}").is_dir() for n in (1, 2, 3))

        deadline = time.monotonic() + CONTROLLER_TIMEOUT_S
        status = _status(bootstrap)
        while status["controller_id"] is None or len(status["brokers"]) < 3:
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
            status = _status(bootstrap)
        assert [b["node_id"] for b in status["brokers"]] == [1, 2, 3]
        assert status["controller_id"] in {1, 2, 3}
        ports = {f"{b['host']}:{b['port']}" for b in status["brokers"]}
        assert ports == set(bootstrap.split(","))
        assert status["offline"] == []

        text = subprocess.run(
            _mq("cluster", "status", "--bootstrap", bootstrap),
            capture_output=True,
            timeout=STATUS_TIMEOUT_S,
            check=False,
        )
        assert text.returncode == 0, text.stderr.decode()
        assert "brokers (3):" in text.stdout.decode()

        up.send_signal(signal.SIGINT)
        assert up.wait(DOWN_TIMEOUT_S) == 0, errors.read_text()[-3000:]
        while (line := lines.get(timeout=DOWN_TIMEOUT_S)) is not None:
            seen.append(line)
        assert seen[-1] == "mq cluster down"
        assert [pid for pid in children if _running(pid)] == []
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(DOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait(DOWN_TIMEOUT_S)
        for pid in children:
            if _running(pid):  # a failed test must not leave a cluster behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

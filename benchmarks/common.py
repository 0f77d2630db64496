"""What the client benchmarks share: a real broker process, percentiles, CPU pressure.

:class:`Broker` runs ``python -m mq_cli.main serve --data-dir DIR --port 0`` (the
broker's defaults: ``flush=interval``), waits up to 30 s for its ``mq
listening on HOST:PORT`` line, and reads its CPU time from ``/proc/PID/stat``
(W8). :func:`cpu_pressure_seconds` tells how long runnable tasks waited for a
CPU (Linux PSI), to show how busy the shared machine was during a run. Used
by :mod:`benchmarks.client` (W1, W3) and :mod:`benchmarks.latency` (W4).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

_LISTENING = re.compile(r"mq listening on (\S+):(\d+)")
_HTTP_LISTENING = re.compile(r"mq HTTP listening on (\S+):(\d+)")
_TICKS = os.sysconf("SC_CLK_TCK")


class Broker:
    """``mq serve`` on a free loopback port with a given (temporary) data directory."""

    def __init__(
        self, data_dir: Path, extra_args: Sequence[str] = (), source: Path | None = None
    ) -> None:
        """``source``: run the broker of that source tree (its working directory and
        ``PYTHONPATH``: ``-m`` puts the working directory first, and this tree's ``mq``
        would win; it needs an ``mq_cli`` link to its ``cli``), e.g. the code before a
        change."""
        env = None
        if source is not None:
            env = {**os.environ, "PYTHONPATH": str(source)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mq_cli.main",
                "serve",
                "--data-dir",
                str(data_dir),
                "--port",
                "0",
                *extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            cwd=source,
        )
        self.bootstrap = ""
        self.http_url = ""
        """``http://HOST:PORT`` when started with ``--http-port`` (metrics, health)."""
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            with self.proc.stderr:
                for raw in self.proc.stderr:
                    http = _HTTP_LISTENING.search(raw.decode(errors="replace"))
                    if http:
                        self.http_url = f"http://{http.group(1)}:{http.group(2)}"
                    found = _LISTENING.search(raw.decode(errors="replace"))
                    if found:
                        self.bootstrap = f"{found.group(1)}:{found.group(2)}"
                        ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not ready.wait(30):
            self.stop()
            raise RuntimeError("the broker did not start within 30 s")

    def cpu_seconds(self) -> float:
        """User + system CPU the broker process has used so far."""
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)
        self._reader.join(15)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-quantile (0 < q <= 1) of an ascending sequence (NaN if empty)."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def cpu_pressure_seconds() -> float:
    """Seconds in which some runnable task waited for a CPU (Linux PSI), or NaN if unknown."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return math.nan
    return int(some.rsplit("total=", 1)[1]) / 1e6

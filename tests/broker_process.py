"""A real ``mq serve`` process for tests: started on a free loopback port, stopped or killed.

It runs ``python -m cli.main serve --data-dir DIR --port 0``, waits (bounded)
for its ``mq listening on HOST:PORT`` line, and stops with SIGTERM, then
SIGKILL after a bounded wait; ``kill`` is a crash (SIGKILL at once).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
_LISTENING = re.compile(r"mq listening on (\S+):(\d+)")


class BrokerProcess:
    """One ``mq serve`` subprocess; restartable on the same data directory and port."""

    def __init__(
        self,
        data_dir: Path,
        *,
        segment_bytes: int | None = None,
        settings: dict[str, int] | None = None,
        log_settings: dict[str, int | str] | None = None,
    ) -> None:
        """``settings`` are top-level broker settings of the config file; ``log_settings``
        its ``[log]`` table (``segment_bytes`` is a shorthand for ``segment.bytes``)."""
        self.data_dir = data_dir
        self.settings = dict(settings or {})
        self.log_settings = dict(log_settings or {})
        if segment_bytes is not None:
            self.log_settings["segment.bytes"] = segment_bytes
        self.host = "127.0.0.1"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader = threading.Thread()
        self.output: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        """Start (on the previous port if there was one) and wait until it listens."""
        args = [sys.executable, "-m", "cli.main", "serve", "--data-dir", str(self.data_dir)]
        args += ["--port", str(self.port)]
        if self.settings or self.log_settings:
            config = self.data_dir.with_name(self.data_dir.name + ".toml")
            lines = [f"{key} = {value!r}" for key, value in self.settings.items()]
            lines.append("[log]")
            lines += [f'"{key}" = {value!r}' for key, value in self.log_settings.items()]
            config.write_text("\n".join(lines) + "\n")
            args += ["--config", str(config)]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        listening = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(self.proc, listening), daemon=True)
        self._reader.start()
        if not listening.wait(START_TIMEOUT_S):
            self.kill()
            raise RuntimeError(f"the broker did not start: {''.join(self.output)[-2000:]}")

    def _read(self, proc: subprocess.Popen[bytes], listening: threading.Event) -> None:
        assert proc.stderr is not None
        with proc.stderr:  # closed at EOF, when the broker exits
            for raw in proc.stderr:
                self._line(raw.decode(errors="replace"), listening)

    def _line(self, line: str, listening: threading.Event) -> None:
        self.output.append(line)
        found = _LISTENING.search(line)
        if found:
            self.host, self.port = found.group(1), int(found.group(2))
            listening.set()

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL after a bounded wait."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        if self._reader.is_alive():
            self._reader.join(STOP_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
        if self._reader.is_alive():
            self._reader.join(STOP_TIMEOUT_S)

    def restart(self) -> None:
        self.stop()
        self.start()

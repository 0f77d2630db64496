"""kill -9 of a real process that appends through a LogWriter, several times over.

A child process (``crash_child.py``) appends to a partition log and prints
every acknowledgement. The parent kills it with SIGKILL at a random moment,
reopens the log itself (recovery), checks that every batch ever acknowledged is
there with identical bytes at its offsets and that the whole log reads back
with valid CRCs and records at the offsets they name, then starts the next
child on the same directory. Runs for ``flush=interval`` (acknowledged from the
page cache, which survives the process) and ``flush=always``.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from crash_child import config_for, digest
from storage_helpers import check_self_describing, decode, split_batches

from mq.storage.log import Log

CHILD = Path(__file__).resolve().parent / "crash_child.py"
KILLS = 5


class Child:
    """A running crash_child.py whose stdout lines are collected by a thread."""

    def __init__(self, directory: Path, policy: str, seed: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(directory), policy, str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.endswith(b"\n"):  # a line cut by the kill was never an acknowledgement
                self.lines.append(raw.decode())
                if raw.startswith(b"ready"):
                    self.ready.set()

    def kill(self) -> str:
        self.proc.send_signal(signal.SIGKILL)
        _, err = self.proc.communicate(timeout=10)
        self._reader.join(timeout=10)
        return err.decode()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["interval", "always"])
def test_acknowledged_batches_survive_kill_9(tmp_path: Path, policy: str) -> None:
    directory = tmp_path / "t-0"
    rng = random.Random(f"crash-{policy}")
    acked: dict[int, tuple[int, str]] = {}  # first offset -> (last offset, digest)
    total_acks = 0
    for round_ in range(KILLS):
        child = Child(directory, policy, rng.randrange(2**32))
        assert child.ready.wait(30), "the child never opened the log"
        threading.Event().wait(rng.uniform(0.05, 0.5))
        err = child.kill()
        assert child.proc.returncode == -signal.SIGKILL, err
        assert "failed" not in child.lines, err
        for line in child.lines:
            if line.startswith("ack "):
                first_s, last_s, hashed = line.split()[1:]
                acked[int(first_s)] = (int(last_s), hashed)
                total_acks += 1

        log = Log.open(directory, config_for(policy))
        found = read_everything(log)
        for first, (last, hashed) in acked.items():
            assert first in found, f"acknowledged batch at {first} is gone after kill {round_}"
            batch = found[first]
            assert digest(batch) == hashed, f"batch at {first} changed after kill {round_}"
            assert decode(batch)[-1].offset == last
        if round_ % 2:
            log.close()
        else:  # leave it unclean: the next child recovers it itself
            for segment in log.segments:
                segment.abandon()
    assert total_acks > 10 * KILLS, "the children acknowledged too little to prove anything"


def read_everything(log: Log) -> dict[int, bytes]:
    """Every batch from the log start to its end, each checked, keyed by base offset."""
    found: dict[int, bytes] = {}
    offset = log.log_start_offset
    while offset < log.next_offset:
        got = log.read(offset, 1 << 20)
        assert got is not None
        for batch in split_batches(got.data):
            check_self_describing(batch)  # valid CRC, records where they claim to be
            first = int.from_bytes(batch[:8], "big")
            assert first == offset, "a gap or an overlap in the log"
            found[first] = batch
            offset = decode(batch)[-1].offset + 1
        assert offset == got.next_offset
    return found

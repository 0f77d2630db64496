"""The mq sink is exactly once: SIGKILL the driver, or the executor's Python workers,
while a streaming query copies one topic into another; restart it from its
checkpoint; the target topic ends with every record once (0 duplicates, 0 missing).

The query runs as its own process (``eos_job.py``: its own driver JVM, in its own
session so that a kill takes the whole driver). A kill is made while the sink is
seen holding part of a micro-batch (every micro-batch has ``PER_TRIGGER``
records, so a sink total that is not a multiple of it is a half-written one).
``local[2,4]`` retries a task whose Python worker was killed (the retried task
resumes after what the killed one wrote); a killed driver is started again and
replays the micro-batch from the checkpoint (:data:`KILLS`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import IO

from client_helpers import consume

from mq.client.sync import SyncAdmin, SyncProducer
from mq.client.types import TopicPartition

JOB = Path(__file__).with_name("eos_job.py")
SOURCE_PARTITIONS = 4
SINK_PARTITIONS = 3
CHUNK = 16_000
"""Records produced whenever the query has caught up: enough for several micro-batches."""
PER_TRIGGER = 4_000
START_TIMEOUT_S = 600
"""Starting a Spark driver takes 15-80 s on this loaded machine: a bound, not a pace."""


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def python_workers(job: subprocess.Popen[bytes]) -> list[int]:
    """The executor's Python workers of ``job``: the processes forked by its
    ``pyspark.daemon`` (children of the JVM, which is a child of the driver script)."""
    workers = []
    stack = [job.pid]
    while stack:
        pid = stack.pop()
        for child in _children(pid):
            if "pyspark.daemon" in _cmdline(pid) and "pyspark.daemon" in _cmdline(child):
                workers.append(child)
            stack.append(child)
    return workers


class Run:
    def __init__(self, bootstrap: str, tmp: Path, name: str) -> None:
        self.bootstrap = bootstrap
        self.source, self.sink = f"{name}-in", f"{name}-out"
        self.checkpoint = tmp / "checkpoint"
        self.logs = tmp
        self.produced = 0
        self.job: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.workers_killed = False
        """Whether the running job's Python workers were killed (it may fail of it)."""
        with SyncAdmin(bootstrap) as admin:
            admin.create_topic(self.source, SOURCE_PARTITIONS)
            admin.create_topic(self.sink, SINK_PARTITIONS)
        self.admin = SyncAdmin(bootstrap)
        self.sink_tps = [TopicPartition(self.sink, p) for p in range(SINK_PARTITIONS)]

    def produce(self) -> None:
        first, self.produced = self.produced, self.produced + CHUNK
        with SyncProducer(self.bootstrap, linger_ms=10) as producer:
            producer.send_many(
                {
                    "topic": self.source,
                    "value": b"%d" % i,
                    "key": None if i % 5 == 0 else b"k%d" % (i % 97),
                    "partition": i % SOURCE_PARTITIONS,
                }
                for i in range(first, self.produced)
            )

    def written(self) -> int:
        return sum(self.admin.list_offsets(self.sink_tps, "latest").values())

    def start(self) -> None:
        if self.job is not None and self.job.poll() is None:
            return
        if self.job is not None and self.job.returncode != 0 and not self.workers_killed:
            raise AssertionError(f"the job failed by itself:\n{self._log_tail()}")
        self.workers_killed = False
        if self.written() >= self.produced:  # caught up (or never started): more work
            self.produce()
        self.starts += 1
        with (self.logs / f"job-{self.starts}.log").open("wb") as log:
            self._popen(log)

    def _popen(self, log: IO[bytes]) -> None:
        self.job = subprocess.Popen(
            [
                sys.executable,
                str(JOB),
                self.bootstrap,
                self.source,
                self.sink,
                str(self.checkpoint),
                str(PER_TRIGGER),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _log_tail(self) -> str:
        return (self.logs / f"job-{self.starts}.log").read_text(errors="replace")[-4000:]

    def wait_for_writes(self) -> bool:
        """Until the sink holds part of a micro-batch (True: the batch is half-written;
        every micro-batch but a source's last has PER_TRIGGER records), or the job ended
        (False)."""
        assert self.job is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.job.poll() is not None:
                return False
            if self.written() % PER_TRIGGER:
                return True
            time.sleep(0.02)
        raise AssertionError(f"the job wrote nothing in {START_TIMEOUT_S}s:\n{self._log_tail()}")

    def kill(self, what: str) -> bool:
        """SIGKILL the driver (its whole session) or the Python workers; False if there
        was nothing to kill at that moment."""
        assert self.job is not None
        if what == "driver":
            os.killpg(self.job.pid, signal.SIGKILL)
            self.job.wait()
            self.job = None
            return True
        workers = python_workers(self.job)
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        self.workers_killed = self.workers_killed or bool(workers)
        return bool(workers)

    def finish(self) -> None:
        self.start()
        assert self.job is not None
        self.job.wait(timeout=1800)
        assert self.job.returncode == 0, self._log_tail()

    def close(self) -> None:
        if self.job is not None and self.job.poll() is None:
            os.killpg(self.job.pid, signal.SIGKILL)
            self.job.wait()
        self.admin.close()


def run_with_kills(bootstrap: str, tmp: Path, name: str, kills: list[str]) -> None:
    run = Run(bootstrap, tmp, name)
    try:
        done = 0
        for what in kills:
            while True:
                run.start()
                if run.wait_for_writes() and run.kill(what):
                    done += 1
                    break
        assert done == len(kills)
        # the last job goes on (or, if it failed or was killed, a new one from the
        # checkpoint) until it has caught up and ends by itself
        if run.job is not None:
            run.job.wait(timeout=1800)
        if run.job is None or run.job.returncode != 0:
            run.job = None
            run.finish()
        total = run.written()  # every record the sink holds, duplicates included
        values = Counter(
            int(r.value or b"-1")
            for records in asyncio.run(
                consume(bootstrap, run.sink_tps, total, timeout_s=120)
            ).values()
            for r in records
        )
        assert sum(values.values()) == total
        duplicates = {v: n for v, n in values.items() if n > 1}
        missing = set(range(run.produced)) - set(values)
        assert not duplicates, (
            f"{len(duplicates)} values written twice, e.g. {list(duplicates)[:5]}"
        )
        assert not missing, f"{len(missing)} values missing, e.g. {sorted(missing)[:5]}"
        assert total == run.produced
    finally:
        run.close()


KILLS = ["worker", "driver"] * 5
"""Ten kills (issue 23 asks for at least ten), alternating an executor's Python worker and
the driver: one run, ~3 minutes on a lightly loaded 2-core machine, most of it starting
Spark drivers. (A separate 3-kill variant ran in CI besides a 12-kill one: it repeated
the first three kills of the other at the cost of ~100 s, and is gone.)"""


def test_exactly_once_under_10_kills(bootstrap: str, tmp_path: Path) -> None:
    run_with_kills(bootstrap, tmp_path, "eos", KILLS)

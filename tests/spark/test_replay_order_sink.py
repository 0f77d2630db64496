"""Exactly once through a real Spark retry that sees its rows in another order.

``replay_job.py`` (its own driver, ``local[2,4]``) writes rows that went through a
shuffle; the first attempt of one task fails after writing part of its rows, and its
retry gets the same rows in another order (a ``mapInArrow`` shuffles them, seeded by
the attempt number). The sink topic must hold every row once: 0 lost, 0 duplicates.
Most rows have no key, so where a row goes depends on its content alone.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from mq.client.sync import SyncAdmin, SyncConsumer
from mq.client.types import TopicPartition

JOB = Path(__file__).with_name("replay_job.py")
ROWS = 2_000
SINK_PARTITIONS = 3
JOB_TIMEOUT_S = 900
"""Starting a Spark driver takes 15-80 s on this loaded machine: a bound, not a pace."""


def sink_values(bootstrap: str, topic: str) -> Counter[bytes]:
    tps = [TopicPartition(topic, p) for p in range(SINK_PARTITIONS)]
    out: Counter[bytes] = Counter()
    with SyncConsumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        end = sum(consumer.end_offsets(tps).values())
        while sum(out.values()) < end:
            for records in consumer.poll(timeout_ms=500).values():
                out.update(r.value or b"" for r in records)
    return out


def test_a_retried_task_with_its_rows_reordered_writes_each_once(
    bootstrap: str, tmp_path: Path
) -> None:
    sink = "replay-order-spark"
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(sink, SINK_PARTITIONS)
    log = tmp_path / "job.log"
    with log.open("wb") as out:
        job = subprocess.run(
            [sys.executable, str(JOB), bootstrap, sink, str(ROWS), str(tmp_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=JOB_TIMEOUT_S,
            check=False,
        )
    tail = log.read_text(errors="replace")[-4000:]
    assert job.returncode == 0, tail
    # the scenario happened: task 0's first attempt failed having written part of its
    # rows, and its retry (attempt 1) wrote the rest in another order
    held, task_rows = map(int, (tmp_path / "failed-attempt").read_text().split())
    assert 0 < held < task_rows, (held, task_rows)
    assert (tmp_path / "task-0-attempt-1").exists(), tail
    values = sink_values(bootstrap, sink)
    expected = Counter(b"row-%d-" % i + b"x" * 600 for i in range(ROWS))
    lost, twice = expected - values, values - expected
    assert (sum(lost.values()), sum(twice.values())) == (0, 0), "lost, duplicated rows"

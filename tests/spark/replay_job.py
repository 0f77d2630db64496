"""A batch write to mq whose first task fails half-way and whose retry sees its rows in
another order, run as its own process (``local[2,4]``: failed tasks are retried) by
``test_replay_order_sink.py``.

    python replay_job.py BOOTSTRAP SINK ROWS MARKERS_DIR

Rows pass a shuffle (``repartition``), then a ``mapInArrow`` that hands each task's
rows on in an order seeded by the attempt number, as a retried task after a shuffle
may see them. Task 0's first attempt stops after half its rows: once the sink holds
some of them, it fails (noting in ``MARKERS_DIR`` how many the sink held then).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession

import spark_connector
from mq.client.sync import SyncConsumer
from mq.client.types import TopicPartition

SINK_PARTITIONS = 3
WAIT_FOR_WRITES_S = 120


def main() -> None:
    bootstrap, sink, rows, markers = sys.argv[1:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("mq-replay-job")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "64")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)

    def reorder(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        assert context is not None
        attempt, task = context.attemptNumber(), context.partitionId()
        table = pa.Table.from_batches(list(batches))
        order = list(range(table.num_rows))
        random.Random(attempt).shuffle(order)
        table = table.take(order)
        failing = attempt == 0 and task == 0
        stop = table.num_rows // 2 if failing else table.num_rows
        yield from table.slice(0, stop).to_batches(max_chunksize=32)
        if failing:
            held = _wait_for_writes(bootstrap, sink, set(table.column("value").to_pylist()))
            Path(markers, "failed-attempt").write_text(f"{held} {table.num_rows}")
            raise RuntimeError(f"injected failure of task {task} attempt {attempt}")
        Path(markers, f"task-{task}-attempt-{attempt}").write_text(str(table.num_rows))

    df = (
        spark.range(int(rows))
        .selectExpr(
            "CASE WHEN id % 4 = 0 THEN CAST(concat('k', id % 13) AS binary) END AS key",
            "CAST(concat('row-', id, '-', repeat('x', 600)) AS binary) AS value",
        )
        .repartition(2)
        .mapInArrow(reorder, "key binary, value binary")
    )
    df.write.format("mq").option("kafka.bootstrap.servers", bootstrap).option("topic", sink).option(
        "kafka.linger.ms", "0"
    ).option("kafka.batch.size", "4096").mode("append").save()
    print("REPLAY-JOB-DONE", flush=True)
    spark.stop()


def _wait_for_writes(bootstrap: str, sink: str, mine: set[bytes]) -> int:
    """Until the sink holds some of this task's rows (the attempt has written part of
    them; the other task writes meanwhile too): how many it holds."""
    tps = [TopicPartition(sink, p) for p in range(SINK_PARTITIONS)]
    deadline = time.monotonic() + WAIT_FOR_WRITES_S
    held = 0
    with SyncConsumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        while not held and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                held += sum(r.value in mine for r in records)
    return held


if __name__ == "__main__":
    main()

"""Spark benchmark W7: read N records from an mq topic into a DataFrame and count them.

From ``BENCHMARKS.md``: rows/s of ``spark.read.format("mq")...load().count()``
on local Spark (``local[*]``), next to the same rows served by an in-memory
Python data source in the same run (:mod:`benchmarks.spark_memory`): once as
tuples (the API's row path) and once as ready Arrow batches (its fastest
path, the one the mq source uses). The ratio mq / in-memory is the figure:
how close reading from the broker comes to the Python Data Source API's own
limit on this machine.

One broker, a topic of ``--partitions`` partitions holding N records of S
bytes (default 1,000,000 x 100 B), produced before the clock starts in
batches of ``--batch-bytes`` (the producer's default, 16 KiB); the rows
for the in-memory source are read back from the topic (so they are the same
rows) and pickled. Each source is read twice to warm up (JVM, Python workers,
the in-memory cache), then ``--runs`` timed counts each, interleaved; medians
are reported. Verified: the mq count and the sum of offsets and value lengths
match what was produced. Usage::

    python -m benchmarks.spark [--messages N] [--size BYTES] [--partitions P]
                               [--batch-bytes B] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.client import payloads
from benchmarks.common import Broker
from mq.client.sync import SyncAdmin, SyncConsumer, SyncProducer
from mq.client.types import TopicPartition

ROOT = Path(__file__).resolve().parents[1]
WARMUPS = 2


def fill(
    bootstrap: str, topic: str, partitions: int, values: list[bytes], batch_bytes: int = 16_384
) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic, partitions)
    with SyncProducer(bootstrap, acks=1, linger_ms=5, batch_size=batch_bytes) as producer:
        for start in range(0, len(values), 50_000):
            producer.send_many(
                {"topic": topic, "value": v, "partition": (start + i) % partitions}
                for i, v in enumerate(values[start : start + 50_000])
            )


def rows_of(bootstrap: str, topic: str, partitions: int, total: int) -> dict[int, list[Any]]:
    """The topic's records as the rows the mq source gives (for the in-memory source)."""
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    utc = datetime.UTC
    with SyncConsumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        got, deadline = 0, time.monotonic() + 300
        while got < total and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500, max_records=50_000).items():
                out[tp.partition] += [
                    (
                        r.key,
                        r.value,
                        r.topic,
                        r.partition,
                        r.offset,
                        datetime.datetime.fromtimestamp(r.timestamp / 1000, utc),
                        r.timestamp_type,
                        list(r.headers),  # PySpark wants a list for an array column
                    )
                    for r in records
                ]
                got += len(records)
    return out


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # the Python workers import benchmarks.spark_memory from the repository
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    from pyspark.sql import SparkSession

    import spark_connector
    from benchmarks.spark_memory import MemorySource

    spark = (
        SparkSession.builder.master("local[*]")
        .appName("mq-bench-w7")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    spark.dataSource.register(MemorySource)
    return spark


def measure(
    messages: int, size: int, partitions: int, runs: int, batch_bytes: int
) -> dict[str, Any]:
    values = payloads(messages, size)
    with tempfile.TemporaryDirectory(prefix="mq-bench-") as tmp:
        broker = Broker(Path(tmp) / "data")
        try:
            fill(broker.bootstrap, "w7", partitions, values, batch_bytes)
            rows_path = Path(tmp) / "rows.pickle"
            rows_path.write_bytes(
                pickle.dumps(rows_of(broker.bootstrap, "w7", partitions, messages))
            )
            spark = session()
            try:
                result = timed(spark, broker, str(rows_path), partitions, runs, values)
                return {**result, "batch_bytes": batch_bytes}
            finally:
                spark.stop()
        finally:
            broker.stop()


def timed(
    spark: Any, broker: Broker, rows_path: str, partitions: int, runs: int, values: list[bytes]
) -> dict[str, Any]:
    def mq() -> Any:
        return (
            spark.read.format("mq")
            .option("bootstrap", broker.bootstrap)
            .option("topic", "w7")
            .load()
        )

    def memory(mode: str) -> Callable[[], Any]:
        return lambda: (
            spark.read.format("mq_memory")
            .option("path", rows_path)
            .option("mode", mode)
            .option("partitions", str(partitions))
            .load()
        )

    sources: dict[str, Callable[[], Any]] = {
        "mq": mq,
        "memory-arrow": memory("arrow"),
        "memory-rows": memory("rows"),
    }
    counts: dict[str, list[int]] = {name: [] for name in sources}
    seconds: dict[str, list[float]] = {name: [] for name in sources}
    broker_cpu: list[float] = []
    for run in range(WARMUPS + runs):
        for name, load in sources.items():
            cpu = broker.cpu_seconds()
            start = time.perf_counter()
            counts[name].append(load().count())
            if run >= WARMUPS:
                seconds[name].append(time.perf_counter() - start)
                if name == "mq":
                    broker_cpu.append(broker.cpu_seconds() - cpu)
    check = mq().selectExpr("count(*)", "sum(offset)", "sum(length(value))").first()
    per_partition = [len(range(p, len(values), partitions)) for p in range(partitions)]
    expected = (
        len(values),
        sum(n * (n - 1) // 2 for n in per_partition),
        sum(len(v) for v in values),
    )
    problem = ""
    if tuple(check) != expected:
        problem = f"mq read {tuple(check)}, expected (count, sum offsets, bytes) {expected}"
    elif any(c != len(values) for cs in counts.values() for c in cs):
        problem = f"counts {counts}"
    return {"seconds": seconds, "broker_cpu": broker_cpu, "problem": problem}


def report(
    result: dict[str, Any], messages: int, size: int, partitions: int, as_json: bool
) -> None:
    seconds: dict[str, list[float]] = result["seconds"]
    rate = {name: messages / statistics.median(s) for name, s in seconds.items()}
    figure = {
        "workload": "W7 spark read+count",
        "system": "mq",
        "messages": messages,
        "bytes": messages * size,
        "partitions": partitions,
        "producer_batch_bytes": result["batch_bytes"],
        "seconds": {name: [round(x, 3) for x in s] for name, s in seconds.items()},
        "rows_per_s": {name: round(r) for name, r in rate.items()},
        "mq_vs_memory_arrow_pct": round(rate["mq"] / rate["memory-arrow"] * 100, 1),
        "mq_vs_memory_rows_pct": round(rate["mq"] / rate["memory-rows"] * 100, 1),
        "broker_cpu_us_per_msg": round(statistics.median(result["broker_cpu"]) / messages * 1e6, 2),
        "verified": not result["problem"],
        "problem": result["problem"],
    }
    if as_json:
        print(json.dumps(figure))
        return
    print(
        f"W7: Spark reads {messages:,} x {size} B from {partitions} partitions "
        f"(produced in batches of {result['batch_bytes']:,} B), count()"
    )
    for name, r in figure["rows_per_s"].items():
        print(f"  {name:13} {r:>10,} rows/s  runs {figure['seconds'][name]}")
    print(
        f"  mq = {figure['mq_vs_memory_arrow_pct']}% of the in-memory Arrow source, "
        f"{figure['mq_vs_memory_rows_pct']}% of the in-memory row source; "
        f"broker {figure['broker_cpu_us_per_msg']} µs/msg; "
        f"verified: {'yes' if figure['verified'] else 'NO ' + figure['problem']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--batch-bytes",
        type=int,
        default=16_384,
        help="the producer's batch size (its default: 16384); bigger batches decode slower",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.messages, args.size, args.partitions, args.runs, args.batch_bytes)
    report(result, args.messages, args.size, args.partitions, args.json)
    return 0 if not result["problem"] else 1


if __name__ == "__main__":
    sys.exit(main())

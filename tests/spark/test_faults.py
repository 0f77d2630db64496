"""Faults under a running read: a broker restarted, a topic deleted (issue 24).

The broker is this module's own real ``mq serve`` (the ``broker`` fixture is
per module), killed with SIGKILL and started again on the same port and data
directory. Streams write to Parquet; every record is checked to arrive
exactly once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

import spark_connector.reader as reader_module
from mq.client.sync import SyncAdmin, SyncProducer
from spark_connector.options import parse_read_options
from spark_connector.ranges import OffsetRange
from spark_connector.reader import DataLossError, read_range

WAIT_S = 180
"""Bound of every wait for a query's progress (local Spark on a shared machine)."""


def produce(bootstrap: str, topic: str, first: int, count: int, size: int = 0) -> None:
    with SyncProducer(bootstrap, linger_ms=20) as producer:
        producer.send_many(
            {"topic": topic, "value": b"%d" % i + b" " * size, "key": b"%d" % (i % 13)}
            for i in range(first, first + count)
        )


def restart_later(broker: BrokerProcess, down_s: float) -> threading.Thread:
    """SIGKILL the broker now and start it again after ``down_s`` (in a thread)."""
    broker.kill()
    thread = threading.Thread(target=lambda: (time.sleep(down_s), broker.start()), daemon=True)
    thread.start()
    return thread


def wait_for(
    check: Callable[[], bool],
    what: str,
    query: StreamingQuery | None = None,
    timeout_s: float = WAIT_S,
) -> None:
    """Poll ``check`` (bounded); fail at once if ``query`` stopped (with its error)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if query is not None and not query.isActive:
            raise AssertionError(f"the query stopped before {what}: {query.exception()}")
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen within {timeout_s} s")


def start_stream(
    spark: SparkSession, bootstrap: str, topics: str, out: Path, **options: str
) -> StreamingQuery:
    reader = spark.readStream.format("mq").option("bootstrap", bootstrap).option("topic", topics)
    for name, value in options.items():
        reader = reader.option(name, value)
    return (
        reader.load()
        .selectExpr("topic", "CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def values_in(spark: SparkSession, out: Path, topic: str | None = None) -> list[int]:
    if not (out / "data" / "_spark_metadata").exists():
        return []
    rows = spark.read.schema("topic string, value string").parquet(str(out / "data")).collect()
    return sorted(int(r.value) for r in rows if topic is None or r.topic == topic)


def test_a_stream_rides_through_a_broker_restart(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("faults-restart", 3)
    produce(bootstrap, "faults-restart", 0, 1_500)
    query = start_stream(
        spark,
        bootstrap,
        "faults-restart",
        tmp_path,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="300",
    )
    try:
        wait_for(lambda: bool(values_in(spark, tmp_path)), "a first micro-batch", query)
        restart_later(broker, 4.0).join(60)  # down 4 s while the query triggers every 200 ms
        assert broker.alive
        produce(bootstrap, "faults-restart", 1_500, 1_500)
        wait_for(lambda: len(values_in(spark, tmp_path)) >= 3_000, "all 3,000 records", query)
        assert query.isActive, query.exception()
    finally:
        query.stop()
    assert query.exception() is None
    assert values_in(spark, tmp_path) == list(range(3_000))  # each exactly once


def test_a_batch_read_and_its_tasks_ride_through_broker_restarts(
    spark: SparkSession, broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = broker.bootstrap
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("faults-batch", 1)
    produce(bootstrap, "faults-batch", 0, 3_000, size=200)

    # planning on the driver, with the broker down for 3 s
    restarted = restart_later(broker, 3.0)
    df = spark.read.format("mq").option("bootstrap", bootstrap).option("topic", "faults-batch")
    assert df.load().count() == 3_000
    restarted.join(60)

    # a task: its consumer started while the broker is down, then the broker killed
    # again after its first chunk (small fetches: many chunks)
    monkeypatch.setattr(reader_module, "FETCH_BYTES", 64 * 1024)
    options = parse_read_options({"bootstrap": bootstrap, "topic": "faults-batch"}, "batch")
    restarted = restart_later(broker, 3.0)
    offsets: list[int] = []
    for i, batch in enumerate(read_range(options, OffsetRange("faults-batch", 0, 0, 3_000))):
        offsets += batch.column("offset").to_pylist()
        if i == 0:
            restarted.join(60)
            restarted = restart_later(broker, 3.0)
    restarted.join(60)
    assert offsets == list(range(3_000))


def test_a_task_on_a_deleted_topic_fails_within_seconds_naming_it(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("faults-deleted", 1)
    produce(bootstrap, "faults-deleted", 0, 100)
    planned = OffsetRange("faults-deleted", 0, 0, 100)  # planned, then the topic goes
    with SyncAdmin(bootstrap) as admin:
        admin.delete_topic("faults-deleted")
    strict = {"bootstrap": bootstrap, "topic": "faults-deleted", "pollTimeoutMs": "30000"}
    began = time.monotonic()
    with pytest.raises(DataLossError, match="topic 'faults-deleted' was deleted"):
        list(read_range(parse_read_options(strict, "batch"), planned))
    assert time.monotonic() - began < 20  # seconds, not pollTimeoutMs
    lenient = parse_read_options({**strict, "failOnDataLoss": "false"}, "batch")
    assert list(read_range(lenient, planned)) == []


@pytest.mark.parametrize("fail", ["true", "false"])
def test_a_deleted_topic_fails_a_stream_naming_it_or_is_left_behind(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path, fail: str
) -> None:
    bootstrap = broker.bootstrap
    keep, gone = f"faults-keep-{fail}", f"faults-gone-{fail}"
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(keep, 2)
        admin.create_topic(gone, 2)
    query = start_stream(
        spark,
        bootstrap,
        f"{keep},{gone}",
        tmp_path,
        startingOffsets="earliest",
        failOnDataLoss=fail,
    )
    try:
        produce(bootstrap, gone, 0, 100)
        wait_for(lambda: len(values_in(spark, tmp_path, gone)) == 100, f"{gone}'s records", query)
        with SyncAdmin(bootstrap) as admin:
            admin.delete_topic(gone)
        deleted_at = time.monotonic()
        if fail == "true":
            with pytest.raises(StreamingQueryException, match=f"'{gone}'.*deleted"):
                query.awaitTermination(60)
            assert time.monotonic() - deleted_at < 30
            return
        produce(bootstrap, keep, 0, 100)
        wait_for(lambda: len(values_in(spark, tmp_path, keep)) == 100, f"{keep}'s records", query)
        assert query.isActive, query.exception()
    finally:
        query.stop()

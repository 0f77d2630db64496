"""Streaming reads: availableNow, restarts from the checkpoint, maxOffsetsPerTrigger."""

from __future__ import annotations

from pathlib import Path

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from mq.client.sync import SyncAdmin, SyncProducer


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    with SyncProducer(bootstrap, linger_ms=20) as producer:
        producer.send_many(
            {"topic": topic, "value": b"%d" % i, "key": b"%d" % (i % 13)}
            for i in range(first, first + count)
        )


def run_available_now(
    spark: SparkSession, bootstrap: str, topic: str, out: Path, **options: str
) -> list[int]:
    """One availableNow run into Parquet at ``out``; the rows of each micro-batch."""
    reader = spark.readStream.format("mq").option("bootstrap", bootstrap).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "the availableNow query did not finish"
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def values_in(spark: SparkSession, out: Path) -> list[int]:
    return sorted(int(r.value) for r in spark.read.parquet(str(out / "data")).collect())


def test_available_now_then_a_restart_reads_only_the_new_records(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("stream-restart", 3)
    produce(bootstrap, "stream-restart", 0, 2_000)
    run_available_now(spark, bootstrap, "stream-restart", tmp_path, startingOffsets="earliest")
    assert values_in(spark, tmp_path) == list(range(2_000))

    produce(bootstrap, "stream-restart", 2_000, 1_500)
    batches = run_available_now(
        spark, bootstrap, "stream-restart", tmp_path, startingOffsets="earliest"
    )
    assert sum(batches) == 1_500  # only what came after the first run
    assert values_in(spark, tmp_path) == list(range(3_500))  # no duplicate, no gap

    assert run_available_now(spark, bootstrap, "stream-restart", tmp_path) == []


def test_max_offsets_per_trigger_caps_every_micro_batch(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("stream-capped", 2)
    produce(bootstrap, "stream-capped", 0, 1_000)
    batches = run_available_now(
        spark,
        bootstrap,
        "stream-capped",
        tmp_path,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="300",
    )
    assert batches == [300, 300, 300, 100]
    assert values_in(spark, tmp_path) == list(range(1_000))


def test_a_new_query_starts_at_latest_by_default(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("stream-latest", 1)
    produce(bootstrap, "stream-latest", 0, 100)
    assert run_available_now(spark, bootstrap, "stream-latest", tmp_path) == []
    produce(bootstrap, "stream-latest", 100, 50)
    assert run_available_now(spark, bootstrap, "stream-latest", tmp_path) == [50]
    assert values_in(spark, tmp_path) == list(range(100, 150))


def start_available_now(
    spark: SparkSession, bootstrap: str, topic: str, out: Path, **options: str
) -> StreamingQuery:
    reader = spark.readStream.format("mq").option("bootstrap", bootstrap).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return (
        reader.load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )


def failure_of(query: StreamingQuery) -> str:
    """The message the query failed with (bounded wait)."""
    try:
        query.awaitTermination(120)
    except StreamingQueryException as exc:
        return str(exc)
    query.stop()
    raise AssertionError("the query did not fail")


def test_a_starting_offset_past_the_end_fails_unless_data_loss_is_allowed(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("stream-past-end", 2)
    produce(bootstrap, "stream-past-end", 0, 20)
    past = '{"stream-past-end": {"0": 500}}'
    query = start_available_now(
        spark, bootstrap, "stream-past-end", tmp_path / "strict", startingOffsets=past
    )
    error = failure_of(query)
    assert "startingOffsets asks stream-past-end-0 from 500, past its end" in error
    assert "UnboundLocalError" not in error

    lenient = tmp_path / "lenient"
    query = start_available_now(
        spark,
        bootstrap,
        "stream-past-end",
        lenient,
        startingOffsets=past,
        failOnDataLoss="false",
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    produce(bootstrap, "stream-past-end", 20, 10)  # partition 0 from its end, 1 from latest
    run_available_now(
        spark, bootstrap, "stream-past-end", lenient, startingOffsets=past, failOnDataLoss="false"
    )
    assert values_in(spark, lenient) == list(range(20, 30))


def test_a_batch_only_option_fails_a_stream_naming_it(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("stream-ending", 1)
    query = start_available_now(spark, bootstrap, "stream-ending", tmp_path, endingOffsets="latest")
    error = failure_of(query)
    assert "endingOffsets is for batch reads" in error
    assert "UnboundLocalError" not in error

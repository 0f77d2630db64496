"""The Spark structured-streaming job: access-log lines in, per-minute stats out.

::

    topic access-logs --parse--> watermark --group by 1-minute window, path--> topic access-stats
                                                                           \-> Parquet files

Parsing is Spark SQL only (``regexp_extract``, ``try_to_timestamp``,
``try_cast``): no Python UDF, so no row leaves the JVM after the source's
Arrow batches come in. The ``try_`` forms turn a malformed field into null
(Spark 4 runs in ANSI mode, where a plain cast would fail the query), and a
line that does not match :data:`~spark_connector.pipeline.events.LINE_PATTERN`
or has no valid time is dropped, as :func:`~spark_connector.pipeline.events.parse_line`
drops it.

The event time comes from the line, not from the record's timestamp (when
it was shipped). ``withWatermark`` bounds the state: in append mode a window
is written once, when the watermark (the latest event time seen minus the
delay) passes its end, and its state is then dropped. The two sinks are two
queries, each with its own checkpoint; each reads the topic and keeps its own
state, and both write the same rows because they see the same lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from spark_connector.pipeline.events import COLUMNS, GROUPS, LINE_PATTERN, TIME_FORMAT_SPARK


@dataclass(frozen=True)
class JobConfig:
    bootstrap: str = "127.0.0.1:9292"
    topic: str = "access-logs"
    output_topic: str = "access-stats"
    output: Path = Path("out")
    """Where the Parquet files go."""
    checkpoint: Path = Path("checkpoint")
    """One checkpoint per sink below it: ``mq/`` and ``parquet/``."""
    watermark_delay: timedelta = timedelta(minutes=2)
    window: timedelta = timedelta(minutes=1)
    starting_offsets: str = "earliest"
    """Where a query with a new checkpoint starts; a restarted one resumes from its checkpoint."""
    max_offsets_per_trigger: int | None = None
    available_now: bool = False
    """Process what the topic holds now, then stop; else run until stopped."""
    trigger_interval: timedelta = timedelta(seconds=10)


def interval(delta: timedelta) -> str:
    """``timedelta(minutes=2)`` as Spark's ``"120 seconds"``."""
    seconds = delta.total_seconds()
    if seconds <= 0 or seconds != int(seconds):
        raise ValueError(f"an interval is a whole number of seconds > 0, not {delta}")
    return f"{int(seconds)} seconds"


def _field(line: Column, name: str) -> Column:
    return F.regexp_extract(line, LINE_PATTERN, GROUPS[name])


def parse(records: DataFrame) -> DataFrame:
    """The well-formed access-log lines of ``records`` (the mq source's rows), parsed."""
    line = F.col("line")
    lines = records.select(F.col("value").cast("string").alias("line")).where(
        line.rlike(LINE_PATTERN)
    )
    size = _field(line, "bytes")
    parsed = lines.select(
        F.try_to_timestamp(_field(line, "time"), F.lit(TIME_FORMAT_SPARK)).alias("event_time"),
        _field(line, "ip").alias("ip"),
        _field(line, "method").alias("method"),
        _field(line, "path").alias("path"),
        _field(line, "status").try_cast("int").alias("status"),
        F.when(size == "-", F.lit(0)).otherwise(size.try_cast("bigint")).alias("bytes"),
        (_field(line, "latency").try_cast("decimal(18,3)") * 1000)
        .try_cast("bigint")
        .alias("latency_ms"),
    )
    return parsed.where(F.col("event_time").isNotNull())


def window_stats(parsed: DataFrame, delay: timedelta, window: timedelta) -> DataFrame:
    """Per window and path: requests, 4xx, 5xx, error rate, bytes, latencies (columns COLUMNS)."""
    status = F.col("status")
    grouped = (
        parsed.withWatermark("event_time", interval(delay))
        .groupBy(F.window("event_time", interval(window)).alias("window"), F.col("path"))
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.count(F.when((status >= 400) & (status < 500), 1)).alias("client_errors"),
            F.count(F.when(status >= 500, 1)).alias("errors"),
            F.sum("bytes").alias("bytes"),
            F.avg("latency_ms").alias("avg_latency_ms"),
            F.max("latency_ms").alias("max_latency_ms"),
        )
    )
    stats = grouped.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "path",
        "requests",
        "client_errors",
        "errors",
        (F.col("errors") / F.col("requests")).alias("error_rate"),
        "bytes",
        "avg_latency_ms",
        "max_latency_ms",
    )
    assert tuple(stats.columns) == COLUMNS
    return stats


def as_records(stats: DataFrame) -> DataFrame:
    """``stats`` as mq records: value the row as JSON (times ISO, UTC), key ``start|path``.

    The JSON is rendered in UTC whatever the session's time zone, so that the
    records do not depend on where the job runs.
    """
    json = F.to_json(
        F.struct(*COLUMNS),
        {"timeZone": "UTC", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss'Z'"},
    )
    return stats.select(json.alias("value"), "path").select(
        F.concat_ws("|", F.get_json_object("value", "$.window_start"), "path").alias("key"),
        "value",
    )


def start(spark: SparkSession, config: JobConfig) -> list[StreamingQuery]:
    """Start the two queries (into mq, into Parquet); the caller waits for or stops them."""
    reader = (
        spark.readStream.format("mq")
        .option("bootstrap", config.bootstrap)
        .option("topic", config.topic)
        .option("startingOffsets", config.starting_offsets)
    )
    if config.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    stats = window_stats(parse(reader.load()), config.watermark_delay, config.window)
    into_mq = (
        as_records(stats)
        .writeStream.format("mq")
        .option("bootstrap", config.bootstrap)
        .option("topic", config.output_topic)
        .option("checkpointLocation", str(config.checkpoint / "mq"))
        .outputMode("append")
    )
    into_parquet = (
        stats.writeStream.format("parquet")
        .queryName("access-stats-to-parquet")
        .option("path", str(config.output))
        .option("checkpointLocation", str(config.checkpoint / "parquet"))
        .outputMode("append")
    )
    queries = []
    for writer in (into_mq, into_parquet):
        if config.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=interval(config.trigger_interval))
        queries.append(writer.start())
    return queries

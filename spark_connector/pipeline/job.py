"""The Spark structured-streaming job: access-log lines in, per-minute stats out.

::

    access-logs -> parse -> watermark -> group by (1-minute window, path) -> topic access-stats
                                                                         -> Parquet files

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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark_connector.pipeline.events import (
    COLUMNS,
    GROUPS,
    LINE_PATTERN,
    TIME_FORMAT_SPARK,
    WindowStats,
)


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


def start(spark: SparkSession, config: JobConfig) -> dict[str, StreamingQuery]:
    """Start the two queries; by sink (``topic NAME``, ``parquet DIR``). The caller waits."""
    reader = (
        spark.readStream.format("mq")
        .option("bootstrap", config.bootstrap)
        .option("topic", config.topic)
        .option("startingOffsets", config.starting_offsets)
    )
    if config.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    stats = window_stats(parse(reader.load()), config.watermark_delay, config.window)
    writers = {
        f"topic {config.output_topic}": as_records(stats)
        .writeStream.format("mq")
        .queryName("access-stats-to-mq")
        .option("bootstrap", config.bootstrap)
        .option("topic", config.output_topic)
        .option("checkpointLocation", str(config.checkpoint / "mq")),
        f"parquet {config.output}": stats.writeStream.format("parquet")
        .queryName("access-stats-to-parquet")
        .option("path", str(config.output))
        .option("checkpointLocation", str(config.checkpoint / "parquet")),
    }
    queries = {}
    for sink, writer in writers.items():
        writer = writer.outputMode("append")
        if config.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=interval(config.trigger_interval))
        queries[sink] = writer.start()
    return queries


STATS_DDL: Final = (
    "window_start timestamp, window_end timestamp, path string, requests bigint, "
    "client_errors bigint, errors bigint, error_rate double, bytes bigint, "
    "avg_latency_ms double, max_latency_ms bigint"
)
"""The Parquet output's schema, named so that an output without files yet reads as empty."""


def read_stats(spark: SparkSession, output: Path) -> list[WindowStats]:
    """Every row of the job's Parquet output (only files of committed micro-batches).

    Times go through epoch seconds: ``collect`` would render a timestamp in
    the Python process's local time zone, whatever the session's.
    """
    if not output.exists():
        return []
    frame = spark.read.schema(STATS_DDL).parquet(str(output))
    rows = frame.select(
        F.unix_seconds("window_start").alias("start"),
        F.unix_seconds("window_end").alias("end"),
        *COLUMNS[2:],
    ).collect()
    return [
        WindowStats(
            datetime.fromtimestamp(row.start, UTC),
            datetime.fromtimestamp(row.end, UTC),
            *(row[name] for name in COLUMNS[2:]),
        )
        for row in rows
    ]

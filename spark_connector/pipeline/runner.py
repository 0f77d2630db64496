"""Running the job: a local Spark session, the two queries until they end, their tallies.

Under ``availableNow`` a query reads what the topic held when it started,
then runs one more micro-batch with no data (Spark 4 does, when a stateful
query's watermark moved): that batch closes the windows the new watermark
passed, so one run emits every window that is final for the lines read. The
windows within ``delay`` of the latest event stay open in the checkpoint's
state until a later run reads newer lines.

With a processing-time trigger the queries run until Ctrl-C (or until one
fails); each micro-batch is reported as it completes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryProgress
from pyspark.sql.streaming.query import StreamingQuery

import spark_connector
from spark_connector.pipeline.job import JobConfig, start
from spark_connector.pipeline.topics import INPUT_PARTITIONS, ensure_topic


def local_session(master: str = "local[*]", shuffle_partitions: int = 4) -> SparkSession:
    """A local SparkSession with format ``mq`` registered, on loopback, times in UTC.

    Python workers run this interpreter (``PYSPARK_PYTHON``), so they import
    the same ``mq`` and ``spark_connector``. Few shuffle partitions: each is a
    state store per micro-batch, and a stateful query keeps the number it was
    started with in its checkpoint.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback, whatever the hostname
    session = (
        SparkSession.builder.master(master)
        .appName("mq-access-log-stats")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    return session


NO_WATERMARK: Final = "1970-01-01T00:00:00.000Z"
"""What Spark reports as the watermark before the first micro-batch with events."""


@dataclass
class Tally:
    """What one query did in this run, summed over its micro-batches."""

    sink: str
    batches: int = 0
    input_rows: int = 0
    output_rows: int | None = 0
    """None when the sink does not count its rows (the Parquet sink reports -1)."""
    dropped_late: int = 0
    """Rows behind the watermark, dropped: 0 unless events come later than the delay."""
    watermark: str | None = None
    last_batch: int = -1

    def add(self, progress: StreamingQueryProgress) -> bool:
        """Count ``progress`` unless it was counted already; True if it was new."""
        if progress.batchId <= self.last_batch:
            return False
        self.last_batch = progress.batchId
        self.batches += 1
        self.input_rows += progress.numInputRows
        written = progress.sink.numOutputRows
        self.output_rows = (
            None if written < 0 or self.output_rows is None else (self.output_rows + written)
        )
        self.dropped_late += sum(op.numRowsDroppedByWatermark for op in progress.stateOperators)
        watermark = progress.eventTime.get("watermark", self.watermark)
        self.watermark = None if watermark == NO_WATERMARK else watermark
        return True


Progress = Callable[[Tally, StreamingQueryProgress], None]


class QueryFailed(RuntimeError):
    """A query of the job stopped with an error (the message has Spark's)."""


def _prepare(config: JobConfig) -> None:
    ensure_topic(config.bootstrap, config.topic, INPUT_PARTITIONS)
    ensure_topic(config.bootstrap, config.output_topic, 1)


def _collect(
    queries: dict[str, StreamingQuery], tallies: dict[str, Tally], report: Progress | None
) -> None:
    for sink, query in queries.items():
        for progress in query.recentProgress:
            if tallies[sink].add(progress) and report is not None:
                report(tallies[sink], progress)


def _stop_all(queries: dict[str, StreamingQuery]) -> None:
    for query in queries.values():
        if query.isActive:
            query.stop()


def run_available_now(
    spark: SparkSession,
    config: JobConfig,
    timeout_s: float = 600.0,
    report: Progress | None = None,
    poll_s: float = 0.5,
) -> list[Tally]:
    """Both queries, each processing what the input topic holds now, then stopping.

    Bounded: queries still running after ``timeout_s`` are stopped and
    TimeoutError raised. A failed query raises :class:`QueryFailed` (and
    the other is stopped). ``report`` is called for each micro-batch.
    """
    if not config.available_now:
        raise ValueError("run_available_now needs a JobConfig with available_now=True")
    _prepare(config)
    queries = start(spark, config)
    tallies = {sink: Tally(sink) for sink in queries}
    deadline = time.monotonic() + timeout_s
    try:
        while _watch(queries, tallies, report):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the job's queries did not finish in {timeout_s:.0f}s")
            time.sleep(poll_s)
    finally:
        _stop_all(queries)
    _collect(queries, tallies, report)
    return list(tallies.values())


def run_until_stopped(
    spark: SparkSession,
    config: JobConfig,
    report: Progress | None = None,
    stopping: Callable[[], None] | None = None,
    poll_s: float = 1.0,
    stop_timeout_s: float = 120.0,
) -> list[Tally]:
    """Both queries on their processing-time trigger until Ctrl-C or a failure.

    ``report`` is called for each micro-batch once it has completed. On
    Ctrl-C (``stopping`` is called then), each query is stopped between two
    micro-batches if it gets there within ``stop_timeout_s``, else (or on a
    second Ctrl-C) at once. Stopping in a micro-batch is safe, the next run
    redoes it from the checkpoint, but the mq sink, like Spark's Kafka sink,
    has then written some of its rows already, and writes them again (the
    Parquet sink commits a micro-batch's files atomically).
    """
    if config.available_now:
        raise ValueError("run_until_stopped needs a JobConfig with available_now=False")
    _prepare(config)
    queries = start(spark, config)
    tallies = {sink: Tally(sink) for sink in queries}
    try:
        while _watch(queries, tallies, report):
            time.sleep(poll_s)
        raise QueryFailed("a query of the job stopped by itself")
    except KeyboardInterrupt:
        if stopping is not None:
            stopping()
        try:
            _stop_between_batches(queries, time.monotonic() + stop_timeout_s)
        except KeyboardInterrupt:
            pass
    finally:
        _stop_all(queries)
    _collect(queries, tallies, report)
    return list(tallies.values())


def _watch(
    queries: dict[str, StreamingQuery], tallies: dict[str, Tally], report: Progress | None
) -> bool:
    """Tally new micro-batches; raise if a query failed; True while any query runs.

    Polled, not only read at the end: Spark keeps a query's last 100
    progress reports (``spark.sql.streaming.numRecentProgressUpdates``).
    """
    _collect(queries, tallies, report)
    for sink, query in queries.items():
        if not query.isActive:
            _raise_failure(sink, query)
    return any(query.isActive for query in queries.values())


def _stop_between_batches(queries: dict[str, StreamingQuery], deadline: float) -> None:
    """Stop each query when no micro-batch of it runs (best effort: one may start just then)."""
    while time.monotonic() < deadline:
        running = [q for q in queries.values() if q.isActive]
        if not running:
            return
        for query in running:
            if not query.status["isTriggerActive"]:
                query.stop()
        time.sleep(0.1)


def _raise_failure(sink: str, query: StreamingQuery) -> None:
    error = query.exception()
    if error is not None:
        raise QueryFailed(f"the query into {sink} failed: {error}")

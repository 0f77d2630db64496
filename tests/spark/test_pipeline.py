"""The log-aggregation pipeline end to end: generated access logs in mq, the streaming job
on local Spark, its Parquet files and output topic against the pure-Python reference.

What Spark does, and these tests rely on: an ``availableNow`` query reads what
the topic held when it started, then runs one more micro-batch without data,
in which the watermark it computed (latest event time - delay) closes every
window ending at or before it. So one run emits exactly the reference's final
windows; the windows within the delay of the latest event stay in the state
until a later run reads newer lines, and then come out once, in neither sink
twice.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from mq.client.sync import SyncAdmin, SyncConsumer, SyncProducer
from mq.client.types import ConsumerRecord
from spark_connector.pipeline.events import (
    WindowStats,
    aggregate,
    format_line,
    parse_line,
    stats_from_json,
)
from spark_connector.pipeline.generator import TrafficConfig, generate_events, produce
from spark_connector.pipeline.job import JobConfig, parse, read_stats
from spark_connector.pipeline.results import read_parquet
from spark_connector.pipeline.runner import Tally, run_available_now
from spark_connector.pipeline.topics import ensure_topic

DELAY = timedelta(minutes=2)
START = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
FIRST = TrafficConfig(seed=11, events=3_000, start=START, per_second=5)
"""10 minutes of event time, the checkout incident at minutes 5-8."""
SECOND = TrafficConfig(seed=12, events=900, start=START + timedelta(minutes=10), per_second=5)
"""The 3 minutes after: they close the last windows of FIRST."""
JUNK = [
    "",
    "GET /index.html",
    '10.0.0.1 - - [31/Feb/2026:10:01:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-" 0.001',
    '10.0.0.1 - - [21/Nov/2026:10:01:00] "GET / HTTP/1.1" 200 1 "-" "-" 0.001',
    '10.0.0.1 - - [21/Nov/2026:10:01:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-"',
]
"""Lines a real log shipper sends too; the job must drop them as the reference does."""


def test_spark_parses_each_line_as_python_does(spark: SparkSession) -> None:
    good = [format_line(e) for e in generate_events(TrafficConfig(seed=4, events=500))]
    odd = [
        '10.0.0.9 - - [21/Nov/2026:05:00:03 -0500] "GET /api/search?q=a HTTP/2.0" 304 - "-" "x" 7',
        '10.0.0.9 - - [01/Jan/2027:00:00:00 +0130] "PUT /a HTTP/1.0" 599 0 "r" "" 0.0005',
        '10.0.0.9 - - [21/Nov/2026:25:00:03 +0000] "GET / HTTP/1.1" 200 1 "-" "-" 0.1',
    ]
    lines = good + odd + JUNK
    frame = spark.createDataFrame([(s.encode(),) for s in lines], "value binary")
    rows = (
        parse(frame)
        .select(
            F.unix_seconds("event_time").alias("time"),
            "ip",
            "method",
            "path",
            "status",
            "bytes",
            "latency_ms",
        )
        .collect()
    )
    got = sorted(tuple(row) for row in rows)
    expected = sorted(
        (int(e.time.timestamp()), e.ip, e.method, e.path, e.status, e.bytes or 0, e.latency_ms)
        for e in map(parse_line, lines)
        if e is not None
    )
    assert len(expected) == len(good) + 2  # the 25 o'clock line is no time
    assert got == expected


def produce_lines(bootstrap: str, topic: str, config: TrafficConfig) -> list[str]:
    """Produce ``config``'s events (and JUNK) into ``topic``; the lines, for the reference."""
    events = list(generate_events(config))
    assert produce(bootstrap, topic, events) == len(events)
    with SyncProducer(bootstrap) as producer:
        producer.send_many({"topic": topic, "value": junk.encode()} for junk in JUNK)
    return [format_line(e) for e in events] + JUNK


def in_topic(bootstrap: str, topic: str) -> list[WindowStats]:
    """The output topic's records, read with the plain consumer (not the connector's
    reader), each key checked against its value."""
    with SyncAdmin(bootstrap) as admin:
        partitions = admin.topic_partitions(topic)
        ends = admin.list_offsets(partitions, "latest")
    records: list[ConsumerRecord] = []
    with SyncConsumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, "the output topic could not be read"
            for batch in consumer.poll(timeout_ms=500).values():
                records += batch
    assert all(r.key is not None and r.value is not None for r in records)
    stats = [stats_from_json(r.value or b"") for r in records]
    assert [r.key for r in records] == [s.key.encode() for s in stats]
    return stats


def by_window(stats: WindowStats) -> tuple[datetime, str]:
    return stats.window_start, stats.path


def assert_same(actual: Sequence[WindowStats], expected: Sequence[WindowStats]) -> None:
    """Equal row for row: counts and bytes exactly, the rate and the mean to 1e-12."""
    got = sorted(actual, key=by_window)
    keys = [(s.window_start, s.path) for s in got]
    assert len(set(keys)) == len(keys), "a window written twice"
    assert keys == [(s.window_start, s.path) for s in expected]
    for row, want in zip(got, expected, strict=True):
        exact = ("window_end", "requests", "client_errors", "errors", "bytes", "max_latency_ms")
        assert [getattr(row, f) for f in exact] == [getattr(want, f) for f in exact], want.key
        assert row.error_rate == pytest.approx(want.error_rate, rel=1e-12, abs=0), want.key
        assert row.avg_latency_ms == pytest.approx(want.avg_latency_ms, rel=1e-12), want.key


def windows_of(rows: Sequence[WindowStats] | Sequence[str]) -> set[tuple[datetime, str]]:
    """(window start, path) of output rows, or of every line (whether final or not)."""
    out = set()
    for row in rows:
        if isinstance(row, WindowStats):
            out.add((row.window_start, row.path))
        elif (event := parse_line(row)) is not None:
            out.add((event.time.astimezone(UTC).replace(second=0), event.path))
    return out


def run_job(spark: SparkSession, bootstrap: str, tmp_path: Path) -> dict[str, Tally]:
    config = JobConfig(
        bootstrap=bootstrap,
        topic="web-logs",
        output_topic="web-stats",
        output=tmp_path / "out",
        checkpoint=tmp_path / "checkpoint",
        watermark_delay=DELAY,
        available_now=True,
    )
    tallies = run_available_now(spark, config, timeout_s=240)
    assert all(t.dropped_late == 0 for t in tallies)
    return {t.sink.split()[0]: t for t in tallies}


def test_the_pipeline_matches_the_reference_run_after_run(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    ensure_topic(bootstrap, "web-logs", 3)
    first = produce_lines(bootstrap, "web-logs", FIRST)
    expected = aggregate(first, DELAY)
    still_open = windows_of(first) - windows_of(expected)
    assert len(expected) > 50
    # the latest event is at 10:09:59, so the watermark is 10:07:59: 10:07-10:08 is open
    assert {start.minute for start, _ in still_open} == {7, 8, 9}
    assert max(s.error_rate for s in expected if s.path == "/api/checkout") > 0.3

    tallies = run_job(spark, bootstrap, tmp_path)
    assert tallies["topic"].input_rows == len(first)
    assert tallies["topic"].output_rows == len(expected)
    in_parquet = read_stats(spark, tmp_path / "out")
    assert_same(in_parquet, expected)
    assert sorted(read_parquet(tmp_path / "out"), key=by_window) == sorted(
        in_parquet, key=by_window
    )
    assert_same(in_topic(bootstrap, "web-stats"), expected)

    second = produce_lines(bootstrap, "web-logs", SECOND)
    expected_now = aggregate(first + second, DELAY)
    newly_closed = windows_of(expected_now) - windows_of(expected)
    assert windows_of(expected_now) >= windows_of(expected)
    assert newly_closed >= still_open  # the windows that waited for newer events

    tallies = run_job(spark, bootstrap, tmp_path)  # from the same checkpoints
    assert tallies["topic"].input_rows == len(second)  # only the new lines
    assert tallies["topic"].output_rows == len(newly_closed)
    in_parquet = read_stats(spark, tmp_path / "out")
    assert_same(in_parquet, expected_now)
    assert sorted(read_parquet(tmp_path / "out"), key=by_window) == sorted(
        in_parquet, key=by_window
    )
    assert_same(in_topic(bootstrap, "web-stats"), expected_now)

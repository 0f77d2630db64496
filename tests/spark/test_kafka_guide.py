"""The snippets of Spark's "Structured Streaming + Kafka Integration Guide", on mq.

Each snippet is written in the guide's shape (its options, its ``selectExpr``),
with only ``format("kafka")`` changed to ``format("mq")`` and the guide's
``host1:port1,host2:port2`` replaced by the test broker; the rows are checked.
Streaming reads use the guide's default (start at the latest offsets): the query
is started, made to process what is there (nothing), then records arrive and it
processes them into a memory table. One SparkSession and one broker for all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from test_write import records_in

from mq.client.sync import SyncAdmin, SyncProducer

SENT: dict[str, list[tuple[int, int, int]]] = {}
"""Per topic: (partition, offset, i) of every record the tests produced (key ``k<i>``,
value ``v<i>``)."""


def produce(bootstrap: str, topic: str, count: int, partitions: int = 2, first: int = 0) -> None:
    """``count`` records ``k<i>``/``v<i>`` (with a header ``i``), created topic if new."""
    with SyncAdmin(bootstrap) as admin:
        if topic not in admin.list_topics():
            admin.create_topic(topic, partitions)
    records = [
        {
            "topic": topic,
            "key": b"k%d" % i,
            "value": b"v%d" % i,
            "headers": [("i", b"%d" % i)],
            "partition": i % partitions,
        }
        for i in range(first, first + count)
    ]
    with SyncProducer(bootstrap, linger_ms=5) as producer:
        sent = producer.send_many(records)
    SENT.setdefault(topic, []).extend(
        (m.partition, m.offset, i) for m, i in zip(sent, range(first, first + count), strict=True)
    )


def kv(topic: str, where: Any = None) -> list[tuple[str, str]]:
    """The (key, value) strings of ``topic`` the tests produced, optionally filtered by
    ``where(partition, offset, i)``."""
    return sorted((f"k{i}", f"v{i}") for p, o, i in SENT[topic] if where is None or where(p, o, i))


def collect_kv(df: DataFrame) -> list[tuple[str, str]]:
    return sorted((r.key, r.value) for r in df.collect())


@pytest.fixture
def streamed(spark: SparkSession) -> Iterator[list[StreamingQuery]]:
    """Queries started by a test, stopped after it."""
    queries: list[StreamingQuery] = []
    yield queries
    for query in queries:
        query.stop()


def run_into_memory(
    df: DataFrame, name: str, queries: list[StreamingQuery], then: Any
) -> DataFrame:
    """Start ``df`` into a memory table, let it reach the end (nothing: it starts at
    latest), call ``then()`` (which produces), process that, return the table."""
    query = df.writeStream.format("memory").queryName(name).start()
    queries.append(query)
    query.processAllAvailable()
    then()
    query.processAllAvailable()
    assert query.exception() is None
    return df.sparkSession.table(name)


# -- reading: streaming queries --------------------------------------------------------------


def test_subscribe_to_one_topic(
    spark: SparkSession, bootstrap: str, streamed: list[StreamingQuery]
) -> None:
    produce(bootstrap, "guide-one", 10)  # before the query: not read (it starts at latest)
    df = (
        spark.readStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "guide-one")
        .load()
    )
    df = df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")
    table = run_into_memory(
        df, "guide_one", streamed, lambda: produce(bootstrap, "guide-one", 30, first=10)
    )
    assert collect_kv(table) == kv("guide-one", lambda p, o, i: i >= 10)


def test_subscribe_to_one_topic_with_headers(
    spark: SparkSession, bootstrap: str, streamed: list[StreamingQuery]
) -> None:
    """The stream that failed with UnboundLocalError ('reader') before issue 24's fix."""
    produce(bootstrap, "guide-headers", 1)
    df = (
        spark.readStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "guide-headers")
        .option("includeHeaders", "true")
        .load()
    )
    df = df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "headers")
    table = run_into_memory(
        df, "guide_headers", streamed, lambda: produce(bootstrap, "guide-headers", 20, first=1)
    )
    rows = table.collect()
    assert sorted((r.key, r.value) for r in rows) == kv("guide-headers", lambda p, o, i: i > 0)
    assert all(
        [(h.key, bytes(h.value)) for h in r.headers] == [("i", r.key[1:].encode())] for r in rows
    )


def test_subscribe_to_multiple_topics(
    spark: SparkSession, bootstrap: str, streamed: list[StreamingQuery]
) -> None:
    produce(bootstrap, "guide-multi-1", 0)
    produce(bootstrap, "guide-multi-2", 0, partitions=3)
    df = (
        spark.readStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "guide-multi-1,guide-multi-2")
        .option("maxOffsetsPerTrigger", "7")
        .load()
    )
    df = df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")

    def both() -> None:
        produce(bootstrap, "guide-multi-1", 20)
        produce(bootstrap, "guide-multi-2", 15, partitions=3, first=100)

    table = run_into_memory(df, "guide_multi", streamed, both)
    assert collect_kv(table) == sorted(kv("guide-multi-1") + kv("guide-multi-2"))
    batches = [p["numInputRows"] for p in streamed[0].recentProgress if p["numInputRows"]]
    assert max(batches) <= 7  # maxOffsetsPerTrigger
    assert sum(batches) == 35


def test_subscribe_to_a_pattern_picks_up_new_topics(
    spark: SparkSession, bootstrap: str, streamed: list[StreamingQuery]
) -> None:
    produce(bootstrap, "guide-pattern-a", 5)
    produce(bootstrap, "guide-other", 5)
    df = (
        spark.readStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", "guide-pattern-.*")
        .load()
    )
    df = df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")

    def more() -> None:
        produce(bootstrap, "guide-pattern-a", 10, first=5)
        produce(bootstrap, "guide-pattern-b", 8, first=50)  # a topic created while it runs
        produce(bootstrap, "guide-other", 5, first=5)

    table = run_into_memory(df, "guide_pattern", streamed, more)
    expected = kv("guide-pattern-a", lambda p, o, i: i >= 5) + kv("guide-pattern-b")
    assert collect_kv(table) == sorted(expected)


# -- reading: batch queries ------------------------------------------------------------------


def test_batch_subscribe_defaults_to_earliest_and_latest(
    spark: SparkSession, bootstrap: str
) -> None:
    produce(bootstrap, "guide-batch", 40)
    df = (
        spark.read.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "guide-batch")
        .load()
    )
    assert collect_kv(df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")) == kv(
        "guide-batch"
    )
    assert "headers" not in df.columns  # only with includeHeaders=true, as Kafka's


def test_batch_multiple_topics_with_explicit_offsets(spark: SparkSession, bootstrap: str) -> None:
    produce(bootstrap, "guide-topic1", 120)
    produce(bootstrap, "guide-topic2", 30, partitions=1)
    df = (
        spark.read.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "guide-topic1,guide-topic2")
        .option("startingOffsets", """{"guide-topic1":{"0":23,"1":-2},"guide-topic2":{"0":-2}}""")
        .option("endingOffsets", """{"guide-topic1":{"0":50,"1":-1},"guide-topic2":{"0":-1}}""")
        .load()
    )
    got = collect_kv(df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)"))
    expected = kv("guide-topic1", lambda p, o, i: p == 1 or 23 <= o < 50) + kv("guide-topic2")
    assert got == sorted(expected)


def test_batch_pattern_at_earliest_and_latest(spark: SparkSession, bootstrap: str) -> None:
    produce(bootstrap, "guide-bpat-1", 10)
    produce(bootstrap, "guide-bpat-2", 10, first=10)
    df = (
        spark.read.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", "guide-bpat-.*")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    got = collect_kv(df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)"))
    assert got == sorted(kv("guide-bpat-1") + kv("guide-bpat-2"))


def test_batch_assign_and_timestamps(spark: SparkSession, bootstrap: str) -> None:
    produce(bootstrap, "guide-assign", 20, partitions=3)
    df = (
        spark.read.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({"guide-assign": [0, 2]}))
        .load()
    )
    got = collect_kv(df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)"))
    assert got == kv("guide-assign", lambda p, o, i: p in (0, 2))
    rows = df.select("partition", "offset", "timestamp").collect()
    stamps = sorted(int(r.timestamp.timestamp() * 1000) for r in rows)
    middle = stamps[len(stamps) // 2]
    by_time = (
        spark.read.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({"guide-assign": [0, 2]}))
        .option("startingTimestamp", str(middle))
        .load()
    )
    assert sorted(r.offset for r in by_time.collect() if r.partition == 0) == sorted(
        r.offset for r in rows if r.partition == 0 and int(r.timestamp.timestamp() * 1000) >= middle
    )
    future = by_time.sparkSession.read.format("mq").option("kafka.bootstrap.servers", bootstrap)
    future = future.option("subscribe", "guide-assign").option("startingTimestamp", str(2**50))
    with pytest.raises(Exception, match="has no record at or after"):
        future.load().collect()
    latest = future.option("startingOffsetsByTimestampStrategy", "latest").load()
    assert latest.count() == 0


# -- writing ----------------------------------------------------------------------------------


def source_stream(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """A stream of ``topic`` from its start (the guide's ``df`` of the write snippets)."""
    return (
        spark.readStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def finish(query: StreamingQuery) -> None:
    query.processAllAvailable()
    assert query.exception() is None
    query.stop()


def written(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple[str, str]]:
    got = records_in(bootstrap, topic, partitions, count)
    return sorted(
        ((k or b"").decode(), (v or b"").decode()) for rs in got.values() for k, v, _ in rs
    )


def test_stream_write_to_the_topic_of_an_option(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    produce(bootstrap, "guide-w-in", 50)
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("guide-w-out", 2)
    df = source_stream(spark, bootstrap, "guide-w-in")
    ds = (
        df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")
        .writeStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "guide-w-out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    finish(ds)
    assert written(bootstrap, "guide-w-out", 2, 50) == kv("guide-w-in")


def test_stream_write_to_the_topic_of_each_row(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    produce(bootstrap, "guide-wt-in", 40)
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("guide-wt-even", 1)
        admin.create_topic("guide-wt-odd", 1)
    df = source_stream(spark, bootstrap, "guide-wt-in").selectExpr(
        "IF(partition = 0, 'guide-wt-even', 'guide-wt-odd') AS topic", "key", "value"
    )
    ds = (
        df.selectExpr("topic", "CAST(key AS STRING)", "CAST(value AS STRING)")
        .writeStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    finish(ds)
    assert written(bootstrap, "guide-wt-even", 1, 20) == kv("guide-wt-in", lambda p, o, i: p == 0)
    assert written(bootstrap, "guide-wt-odd", 1, 20) == kv("guide-wt-in", lambda p, o, i: p == 1)


def test_batch_write_to_the_topic_of_an_option_and_of_each_row(
    spark: SparkSession, bootstrap: str
) -> None:
    produce(bootstrap, "guide-bw-in", 30)
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("guide-bw-out", 1)
        admin.create_topic("guide-bw-col", 1)
    df = (
        spark.read.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "guide-bw-in")
        .load()
    )
    df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").write.format("mq").option(
        "kafka.bootstrap.servers", bootstrap
    ).option("topic", "guide-bw-out").mode("append").save()
    assert written(bootstrap, "guide-bw-out", 1, 30) == kv("guide-bw-in")
    df.selectExpr(
        "'guide-bw-col' AS topic", "CAST(key AS STRING)", "CAST(value AS STRING)"
    ).write.format("mq").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    assert written(bootstrap, "guide-bw-col", 1, 30) == kv("guide-bw-in")


def test_batch_write_in_the_default_save_mode_says_what_to_do(
    spark: SparkSession, bootstrap: str
) -> None:
    """The guide's batch write has no ``.mode(...)``: Spark's default, ErrorIfExists,
    which PySpark refuses for every Python data source before mq's code runs."""
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception, match="ErrorIfExists"):
        df.write.format("mq").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", "guide-bw-default"
        ).save()


# -- errors reach the user as one clear line -------------------------------------------------


def test_stream_errors_name_the_option_or_topic(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    with pytest.raises(Exception, match="'subscribe' and 'subscribePattern'"):
        spark.readStream.format("mq").option("subscribe", "a").option(
            "subscribePattern", "b"
        ).load()
    query = (
        spark.readStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "guide-no-such-topic")
        .load()
        .writeStream.format("memory")
        .queryName("guide_missing")
        .start()
    )
    with pytest.raises(StreamingQueryException) as caught:
        query.awaitTermination(120)
    assert "guide-no-such-topic" in str(caught.value)
    assert "UnboundLocalError" not in str(caught.value)

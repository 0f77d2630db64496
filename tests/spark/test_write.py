"""Writes: a DataFrame's rows become exactly its records; schema errors are clear."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from client_helpers import consume
from pyspark.sql import SparkSession

from mq.client.sync import SyncAdmin, SyncProducer
from mq.client.types import TopicPartition

Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def records_in(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> dict[int, list[Record]]:
    """Every record of ``topic`` read back with the plain client: by partition, in order."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    got = asyncio.run(consume(bootstrap, tps, expected, timeout_s=30))
    return {
        tp.partition: [(r.key, r.value, tuple(r.headers)) for r in records]
        for tp, records in got.items()
    }


def test_a_write_produces_exactly_the_dataframes_rows(spark: SparkSession, bootstrap: str) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("write-rows", 3)
    rows = [
        (
            f"value-{i}" if i % 10 else "",
            None if i % 7 == 0 else f"key-{i % 5}".encode(),
            [("i", b"%d" % i), ("none", None)] if i % 4 == 0 else [],
            i % 3,
        )
        for i in range(3_000)
    ]
    df = spark.createDataFrame(
        rows,
        "value string, key binary, headers array<struct<key: string, value: binary>>, "
        "partition int",
    ).repartition(4)  # four tasks write at once: compared as sets per partition
    df.write.format("mq").option("bootstrap", bootstrap).option("topic", "write-rows").mode(
        "append"
    ).save()

    got = records_in(bootstrap, "write-rows", 3, len(rows))
    expected: dict[int, list[Record]] = {0: [], 1: [], 2: []}
    for value, key, headers, partition in rows:
        expected[partition].append((key, value.encode(), tuple(headers)))
    assert {p: sorted(rs, key=repr) for p, rs in got.items()} == {
        p: sorted(rs, key=repr) for p, rs in expected.items()
    }


def test_one_task_keeps_its_rows_in_order(spark: SparkSession, bootstrap: str) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("write-order", 1)
    df = spark.range(5_000).selectExpr("CAST(id AS STRING) AS value").coalesce(1)
    df.write.format("mq").option("bootstrap", bootstrap).option("topic", "write-order").mode(
        "append"
    ).save()
    got = records_in(bootstrap, "write-order", 1, 5_000)
    assert [int(value or b"") for _, value, _ in got[0]] == list(range(5_000))


def test_a_topic_column_routes_rows_without_the_option(spark: SparkSession, bootstrap: str) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("write-a", 1)
        admin.create_topic("write-b", 1)
    df = spark.createDataFrame(
        [("write-a", b"1"), ("write-b", b"2"), ("write-a", b"4")],
        "topic string, value binary",
    ).coalesce(1)
    df.write.format("mq").option("bootstrap", bootstrap).mode("append").save()
    assert [v for _, v, _ in records_in(bootstrap, "write-a", 1, 2)[0]] == [b"1", b"4"]
    assert [v for _, v, _ in records_in(bootstrap, "write-b", 1, 1)[0]] == [b"2"]
    nulls = spark.createDataFrame([(None, b"3")], "topic string, value binary")
    with pytest.raises(Exception, match="null 'topic' and there is no 'topic' option"):
        nulls.write.format("mq").option("bootstrap", bootstrap).mode("append").save()


def test_the_topic_option_wins_over_a_topic_column(spark: SparkSession, bootstrap: str) -> None:
    """As in Kafka's sink: a DataFrame read from A, written with topic=B, goes all to B."""
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("write-from", 2)
        admin.create_topic("write-to", 2)
    with SyncProducer(bootstrap) as producer:
        producer.send_many(
            {"topic": "write-from", "value": b"%d" % i, "partition": i % 2} for i in range(100)
        )
    df = spark.read.format("mq").option("bootstrap", bootstrap).option("topic", "write-from")
    df.load().write.format("mq").option("bootstrap", bootstrap).option("topic", "write-to").mode(
        "append"
    ).save()
    got = records_in(bootstrap, "write-to", 2, 100)
    assert sorted(int(v or b"") for rs in got.values() for _, v, _ in rs) == list(range(100))
    with SyncAdmin(bootstrap) as admin:
        ends = admin.list_offsets([TopicPartition("write-from", p) for p in (0, 1)], "latest")
    assert sum(ends.values()) == 100  # nothing added to the topic the rows came from


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("key binary", "needs a 'value' column"),
        ("value int", "'value' must be binary or string"),
        ("value binary, partition string", "'partition' must be int"),
        ("value binary, headers array<string>", "'headers' must be array<struct"),
        ("value binary, topic int", "'topic' must be string"),
    ],
)
def test_a_wrong_schema_fails_before_any_task(
    spark: SparkSession, bootstrap: str, ddl: str, message: str
) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        df.write.format("mq").option("bootstrap", bootstrap).option("topic", "write-x").mode(
            "append"
        ).save()


def test_overwrite_and_a_missing_topic_are_refused(spark: SparkSession, bootstrap: str) -> None:
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="appended to, not overwritten"):
        df.write.format("mq").option("topic", "write-x").mode("overwrite").save()
    with pytest.raises(Exception, match="needs option 'topic' or a 'topic' column"):
        df.write.format("mq").option("bootstrap", bootstrap).mode("append").save()


def test_a_stream_copies_one_topic_into_another(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("write-source", 2)
        admin.create_topic("write-sink", 2)
    with SyncProducer(bootstrap) as producer:
        producer.send_many(
            {"topic": "write-source", "value": b"%d" % i, "partition": i % 2} for i in range(2_000)
        )
    query = (
        spark.readStream.format("mq")
        .option("bootstrap", bootstrap)
        .option("topic", "write-source")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("value", "partition", "CAST(offset AS STRING) AS key")
        .writeStream.format("mq")
        .option("bootstrap", bootstrap)
        .option("topic", "write-sink")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    assert query.exception() is None
    got = records_in(bootstrap, "write-sink", 2, 2_000)
    for partition in (0, 1):
        values = [int(v or b"") for _, v, _ in got[partition]]
        assert sorted(values) == list(range(partition, 2_000, 2))
        offsets = [int(k or b"") for k, _, _ in got[partition]]
        assert sorted(offsets) == list(range(1_000))

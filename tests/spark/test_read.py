"""Batch reads: exactly the records of a topic, offset ranges, minPartitions, errors."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from mq.client.sync import SyncAdmin, SyncProducer
from mq.client.types import TopicPartition

Row = tuple[str, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def produce(
    bootstrap: str, topic: str, count: int, partitions: int = 3
) -> dict[tuple[int, int], Row]:
    """``count`` records (keys, nulls, headers, empty values) into a new topic; by position."""
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic, partitions)
    records = [
        {
            "topic": topic,
            "value": b"" if i % 11 == 0 else b"value-%d" % i,
            "key": None if i % 3 == 0 else b"key-%d" % (i % 17),
            "headers": [("n", b"%d" % i), ("empty", None)] if i % 4 == 0 else [],
        }
        for i in range(count)
    ]
    with SyncProducer(bootstrap, linger_ms=20) as producer:
        sent = producer.send_many(records)
    return {
        (meta.partition, meta.offset): (
            topic,
            meta.partition,
            meta.offset,
            record["key"],
            record["value"],
            tuple(record["headers"]),
        )
        for meta, record in zip(sent, records, strict=True)
    }


def rows(df: DataFrame) -> dict[tuple[int, int], Row]:
    out: dict[tuple[int, int], Row] = {}
    for r in df.collect():
        headers = tuple(
            (h["key"], None if h["value"] is None else bytes(h["value"])) for h in r.headers
        )
        key = None if r.key is None else bytes(r.key)
        value = None if r.value is None else bytes(r.value)
        assert (r.partition, r.offset) not in out, "a record read twice"
        out[(r.partition, r.offset)] = (r.topic, r.partition, r.offset, key, value, headers)
    return out


def read(spark: SparkSession, bootstrap: str, headers: bool = True, **options: Any) -> DataFrame:
    """A batch read; with ``includeHeaders=true`` unless ``headers`` is False (the rows
    compare headers)."""
    if headers:
        options.setdefault("includeHeaders", "true")
    reader = spark.read.format("mq").option("bootstrap", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value if isinstance(value, str) else json.dumps(value))
    return reader.load()


def test_a_batch_read_returns_exactly_the_topics_records(
    spark: SparkSession, bootstrap: str
) -> None:
    sent = produce(bootstrap, "read-all", 5_000)
    df = read(spark, bootstrap, topic="read-all")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    assert df.count() == 5_000
    assert rows(df) == sent
    stamps = df.selectExpr("min(timestamp)", "max(timestamp)", "max(timestampType)").first()
    assert stamps is not None
    assert stamps[0] is not None
    assert stamps[2] == 0


def test_offset_ranges_read_exactly_their_offsets(spark: SparkSession, bootstrap: str) -> None:
    sent = produce(bootstrap, "read-ranges", 3_000)
    per_partition = {p: max(o for q, o in sent if q == p) + 1 for p, _ in sent}
    df = read(
        spark,
        bootstrap,
        topic="read-ranges",
        startingOffsets={"read-ranges": {"0": 10, "2": -1}},
        endingOffsets={"read-ranges": {"0": 250, "1": 7}},
    )
    expected = {
        k: v
        for k, v in sent.items()
        if (k[0] == 0 and 10 <= k[1] < 250) or (k[0] == 1 and k[1] < 7)
    }
    assert rows(df) == expected
    assert per_partition[2] > 0  # partition 2 from latest to latest: nothing


def test_min_partitions_splits_ranges_and_reads_each_record_once(
    spark: SparkSession, bootstrap: str
) -> None:
    sent = produce(bootstrap, "read-split", 4_000, partitions=2)
    df = read(spark, bootstrap, topic="read-split", minPartitions="7")
    assert df.rdd.getNumPartitions() == 7
    assert rows(df) == sent
    assert df.count() == 4_000


def test_several_topics_in_one_read(spark: SparkSession, bootstrap: str) -> None:
    one = produce(bootstrap, "read-one", 300, partitions=1)
    two = produce(bootstrap, "read-two", 200, partitions=2)
    df = read(spark, bootstrap, topic="read-one,read-two")
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {"read-one": 300, "read-two": 200}
    got = rows(df.where("topic = 'read-one'"))
    assert got == one
    assert len(two) == 200


def test_deleted_records_are_data_loss_unless_allowed(spark: SparkSession, bootstrap: str) -> None:
    sent = produce(bootstrap, "read-lost", 600, partitions=1)
    with SyncAdmin(bootstrap) as admin:
        admin.delete_records({TopicPartition("read-lost", 0): 100})
    from_zero = {"startingOffsets": {"read-lost": {"0": 0}}}
    with pytest.raises(Exception, match="offsets 0 to 99 are gone"):
        read(spark, bootstrap, topic="read-lost", **from_zero).collect()
    df = read(spark, bootstrap, topic="read-lost", failOnDataLoss="false", **from_zero)
    assert rows(df) == {k: v for k, v in sent.items() if k[1] >= 100}
    assert read(spark, bootstrap, topic="read-lost").count() == 500  # earliest: the new start


def test_headers_are_a_column_only_with_include_headers(
    spark: SparkSession, bootstrap: str
) -> None:
    produce(bootstrap, "read-headers", 20, partitions=1)
    plain = spark.read.format("mq").option("bootstrap", bootstrap).option("topic", "read-headers")
    df = plain.load()
    assert "headers" not in df.columns
    assert df.columns[-1] == "timestampType"
    assert df.count() == 20
    with_headers = read(spark, bootstrap, topic="read-headers", includeHeaders="true")
    assert with_headers.columns[-1] == "headers"
    assert sum(len(r.headers) for r in with_headers.collect()) == 2 * 5  # records 0, 4, .. 16


def test_empty_topics_and_empty_ranges_read_as_empty(spark: SparkSession, bootstrap: str) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("read-empty", 2)
    assert read(spark, bootstrap, False, topic="read-empty").collect() == []
    produce(bootstrap, "read-some", 10, partitions=1)
    assert read(spark, bootstrap, False, topic="read-some", startingOffsets="latest").count() == 0
    at_four = {"read-some": {"0": 4}}
    df = read(
        spark, bootstrap, False, topic="read-some", startingOffsets=at_four, endingOffsets=at_four
    )
    assert df.collect() == []
    assert read(spark, bootstrap, False, topic="read-some").count() == 10


def test_a_batch_read_ignores_max_offsets_per_trigger(spark: SparkSession, bootstrap: str) -> None:
    produce(bootstrap, "read-no-cap", 50, partitions=1)
    assert (
        read(spark, bootstrap, False, topic="read-no-cap", maxOffsetsPerTrigger="10").count() == 50
    )


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("startingOffsetz", "earliest", "unknown option(s) startingoffsetz"),
        ("failOnDataLoss", "maybe", "failOnDataLoss is true or false"),
        ("retryTimeoutMs", "soon", "retryTimeoutMs is a whole number > 0"),
    ],
)
def test_option_errors_come_at_load(
    spark: SparkSession, bootstrap: str, option: str, value: str, message: str
) -> None:
    """At load(), before any action, for batch reads and streams alike."""
    for reader in (spark.read, spark.readStream):
        configured = reader.format("mq").option("bootstrap", bootstrap).option("topic", "any")
        with pytest.raises(Exception, match=re.escape(message)) as raised:
            configured.option(option, value).load()
        assert "UnboundLocalError" not in str(raised.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "no-such-topic"}, "do not exist"),
        ({"topic": "read-all", "startingOffsetz": "earliest"}, "unknown option"),
        ({"topic": "read-all", "endingOffsets": {"read-all": {"0": 10**9}}}, "past its end"),
        ({"topic": "read-all", "startingOffsets": {"read-all": {"9": 0}}}, "does not have"),
        (
            {"topic": "read-all", "startingOffsets": {"read-all": {"0": 10**9}}},
            "is after endingOff",
        ),
    ],
)
def test_bad_options_fail_with_a_clear_message(
    spark: SparkSession, bootstrap: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        read(spark, bootstrap, **options).collect()

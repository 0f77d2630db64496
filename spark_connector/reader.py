"""Reading: planning offset ranges on the driver, reading one range on an executor.

:class:`MQBatchReader` is ``spark.read.format("mq")``: at planning it asks the
cluster for the offsets that ``startingOffsets``/``endingOffsets`` name and
makes one :class:`RangePartition` per topic-partition range (more with
``minPartitions``). :func:`read_range` is what each Spark task runs: a
:class:`~mq.client.sync.SyncConsumer` assigned to the one partition, seeked to
the range's start, yielding Arrow record batches until the range's end, and
not one record past it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from mq.client.sync import SyncAdmin, SyncConsumer
from mq.client.types import TopicPartition
from mq.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from spark_connector.columnar import to_arrow_columns
from spark_connector.options import ReadOptions
from spark_connector.ranges import OffsetRange, Partitioned, plan, resolve

FETCH_BYTES = 8 * 1024 * 1024
"""Bytes per fetch of the one partition a task reads: each fetched chunk becomes one
Arrow batch for Spark (:mod:`spark_connector.columnar`)."""


class DataLossError(RuntimeError):
    """Records a query was to read are gone (retention, delete_records, a deleted topic)."""


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark task: the records ``start <= offset < end`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int


class MQBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[RangePartition]:
        with admin_for(self.options) as admin:
            start, end = offsets_between(admin, self.options)
        return [RangePartition(*r) for r in plan(start, end, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(self.options, OffsetRange(*_fields(partition)))


def _fields(p: RangePartition) -> tuple[str, int, int, int]:
    return p.topic, p.partition, p.start, p.end


def partitions_of(admin: SyncAdmin, topics: tuple[str, ...]) -> list[tuple[str, int]]:
    """Every partition of ``topics``; an unknown topic is an error, as in Spark's Kafka source."""
    known = set(admin.list_topics())
    missing = [t for t in topics if t not in known]
    if missing:
        raise UnknownTopicOrPartitionError(f"topic(s) {missing} do not exist")
    return [(tp.topic, tp.partition) for t in topics for tp in admin.topic_partitions(t)]


def list_offsets(
    admin: SyncAdmin, partitions: list[tuple[str, int]]
) -> tuple[Partitioned, Partitioned]:
    """(log start, high watermark) of every partition."""
    tps = [TopicPartition(t, p) for t, p in partitions]
    earliest = admin.list_offsets(tps, "earliest")
    latest = admin.list_offsets(tps, "latest")
    return (
        {(tp.topic, tp.partition): o for tp, o in earliest.items()},
        {(tp.topic, tp.partition): o for tp, o in latest.items()},
    )


def offsets_between(admin: SyncAdmin, options: ReadOptions) -> tuple[Partitioned, Partitioned]:
    """The start and end offsets of a batch read, every partition resolved."""
    partitions = partitions_of(admin, options.topics)
    earliest, latest = list_offsets(admin, partitions)
    start = resolve(options.starting, partitions, earliest, latest, "earliest")
    end = resolve(options.ending, partitions, earliest, latest, "latest")
    for tp, offset in end.items():
        if offset > latest[tp]:
            raise DataLossError(
                f"endingOffsets asks {tp[0]}-{tp[1]} up to {offset}, past its end {latest[tp]}"
            )
        if start[tp] > offset:
            raise ValueError(
                f"startingOffsets {start[tp]} is after endingOffsets {offset} for {tp[0]}-{tp[1]}"
            )
    return start, end


def read_range(options: ReadOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` as Arrow batches, in offset order, stopping exactly at ``r.end``.

    The consumer hands over each fetch undecoded, and each becomes one Arrow
    batch at once (:func:`~spark_connector.columnar.to_arrow_columns`).

    A range whose start is below the partition's log start lost data: an error
    (:class:`DataLossError`), or with ``failOnDataLoss=false`` the read goes on
    from the log start. Offsets missing inside the range (compaction, control
    batches) are skipped. If the range cannot be finished within
    ``pollTimeoutMs`` of no progress, the task fails instead of hanging.
    """
    tp = TopicPartition(r.topic, r.partition)
    with SyncConsumer(
        bootstrap=options.bootstrap,
        client_id="mq-spark",
        auto_offset_reset="none",
        enable_auto_commit=False,
        max_partition_fetch_bytes=FETCH_BYTES,
        request_timeout_ms=options.request_timeout_ms,
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, r.start)
        position = r.start
        stalled_since = time.monotonic()
        while position < r.end:
            try:
                chunk = consumer.poll_raw(timeout_ms=500).get(tp)
            except OffsetOutOfRangeError:
                earliest = _log_start(options, tp)
                if earliest <= position:  # past the end: the partition was recreated or cut
                    if options.fail_on_data_loss:
                        raise DataLossError(
                            f"{r.topic}-{r.partition}: offset {position} is past the end of "
                            "the partition (was the topic deleted and created again?)"
                        ) from None
                    return
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"{r.topic}-{r.partition}: offsets {position} to {earliest - 1} are gone "
                        "(retention or deleted records); set failOnDataLoss=false to skip them"
                    ) from None
                consumer.seek(tp, earliest)
                position = earliest
                continue
            if chunk is not None:
                batch = to_arrow_columns(chunk.data, r.topic, r.partition, position, r.end)
                if batch is not None:
                    yield batch
                position = max(position, chunk.next_offset)
                stalled_since = time.monotonic()
                continue
            if time.monotonic() - stalled_since > options.poll_timeout_ms / 1000:
                raise TimeoutError(
                    f"{r.topic}-{r.partition}: no record past offset {position} within "
                    f"pollTimeoutMs={options.poll_timeout_ms} (range ends at {r.end})"
                )


def admin_for(options: ReadOptions) -> SyncAdmin:
    return SyncAdmin(
        options.bootstrap, client_id="mq-spark", request_timeout_ms=options.request_timeout_ms
    )


def _log_start(options: ReadOptions, tp: TopicPartition) -> int:
    with admin_for(options) as admin:
        return admin.list_offsets([tp], "earliest")[tp]

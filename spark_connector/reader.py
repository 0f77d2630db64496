"""Reading: planning offset ranges on the driver, reading one range on an executor.

:class:`MQBatchReader` is ``spark.read.format("mq")``: at planning it asks the
cluster for the offsets that ``startingOffsets``/``endingOffsets`` name and
makes one :class:`RangePartition` per topic-partition range (more with
``minPartitions``). :func:`read_range` is what each Spark task runs: a
:class:`~mq.client.sync.SyncConsumer` assigned to the one partition, seeked to
the range's start, yielding Arrow record batches until the range's end, and
not one record past it.

Both ride through a broker restart or a leader failover: calls that fail with
retriable errors are retried for up to ``retryTimeoutMs``
(:mod:`spark_connector.retry`), and a task resumes at the offset after the
last record it handed to Spark. A task that stops getting records checks, every
:data:`DELETION_CHECK_S`, that its topic still exists: a deleted topic fails the
task within seconds naming it (or, with ``failOnDataLoss=false``, ends the
range there).
"""

from __future__ import annotations

# isort: off
import spark_connector._needs_extra  # noqa: F401  (first: a missing extra is one line)

# isort: on
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from mq.client.sync import SyncAdmin, SyncConsumer
from mq.client.types import TopicPartition
from mq.errors import OffsetOutOfRangeError
from spark_connector.columnar import to_arrow_columns
from spark_connector.options import OptionError, ReadOptions
from spark_connector.planning import (
    end_offsets,
    list_offsets,
    start_offsets,
    subscribed_partitions,
)
from spark_connector.ranges import OffsetRange, Partitioned, plan
from spark_connector.retry import retrying
from spark_connector.schema import without_headers
from spark_connector.security import client_kwargs

T = TypeVar("T")

log = logging.getLogger(__name__)

DELETION_CHECK_S: Final = 2.0
"""After this long without a record while its range is unfinished, a task asks the
cluster whether its topic still exists and still reaches its position. The
consumer's fetcher retries UNKNOWN_TOPIC_OR_PARTITION (a leader move causes it
too), so without this check a deleted topic would stall the task for
``pollTimeoutMs``; with it the query fails within seconds, naming the topic. One
metadata request per check: cheap at this pace."""

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
        start, end = with_admin(
            self.options,
            f"planning the read of {self.options.subscription}",
            lambda a: offsets_between(a, self.options),
        )
        return [RangePartition(*r) for r in plan_ranges(self.options, start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            # nothing to read (an empty topic or range): Spark still runs one task,
            # with its own placeholder partition
            return iter(())
        return read_range(self.options, OffsetRange(*_fields(partition)))


def plan_ranges(options: ReadOptions, start: Partitioned, end: Partitioned) -> list[OffsetRange]:
    return plan(start, end, options.min_partitions, options.max_records_per_partition)


def _fields(p: RangePartition) -> tuple[str, int, int, int]:
    return p.topic, p.partition, p.start, p.end


def offsets_between(admin: SyncAdmin, options: ReadOptions) -> tuple[Partitioned, Partitioned]:
    """The start and end offsets of a batch read, every partition resolved. A
    subscribed or assigned topic that does not exist is an error, as in Spark's Kafka
    source; a pattern that matches nothing reads nothing."""
    partitions, missing = subscribed_partitions(admin, options)
    if missing:
        raise OptionError(f"topic(s) {missing} do not exist")
    earliest, latest = list_offsets(admin, partitions)
    start = start_offsets(admin, options, partitions, earliest, latest, "earliest")
    end = end_offsets(admin, options, partitions, earliest, latest)
    for tp, offset in end.items():
        if offset > latest[tp]:
            raise DataLossError(
                f"endingOffsets asks {tp[0]}-{tp[1]} up to {offset}, past its end {latest[tp]}"
            )
        if start[tp] > offset:
            raise OptionError(
                f"startingOffsets {start[tp]} is after endingOffsets {offset} for "
                f"{tp[0]}-{tp[1]} (as resolved from the offset or timestamp options)"
            )
    return start, end


def read_range(options: ReadOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` as Arrow batches, in offset order, stopping exactly at ``r.end``.

    The consumer hands over each fetch undecoded, and each becomes one Arrow
    batch at once (:func:`~spark_connector.columnar.to_arrow_columns`); the
    ``headers`` column is left out unless ``includeHeaders``.

    A range whose start is below the partition's log start lost data: an error
    (:class:`DataLossError`), or with ``failOnDataLoss=false`` the read goes on
    from the log start. Offsets missing inside the range (compaction, control
    batches) are skipped. While no record comes (a broker restarting, a leader
    moving) the consumer keeps fetching; every :data:`DELETION_CHECK_S` the task
    checks that the topic still exists (:func:`_still_there`). If the range
    cannot be finished within ``pollTimeoutMs`` of no progress, the task fails
    instead of hanging.
    """
    tp = TopicPartition(r.topic, r.partition)
    consumer = retrying(
        f"connecting to read {r.topic}-{r.partition}",
        options.retry_timeout_ms,
        lambda: _consumer(options),
    )
    with consumer:
        consumer.assign([tp])
        consumer.seek(tp, r.start)
        position = r.start
        stalled_since = checked_at = time.monotonic()
        while position < r.end:
            try:
                chunk = consumer.poll_raw(timeout_ms=500).get(tp)
            except OffsetOutOfRangeError:
                earliest = with_admin(
                    options,
                    f"looking up the log start of {r.topic}-{r.partition}",
                    lambda a: a.list_offsets([tp], "earliest")[tp],
                )
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
                    yield batch if options.include_headers else without_headers(batch)
                position = max(position, chunk.next_offset)
                stalled_since = checked_at = time.monotonic()
                continue
            now = time.monotonic()
            if now - checked_at >= DELETION_CHECK_S:
                if not _still_there(options, r, position):
                    return
                checked_at = time.monotonic()
            if now - stalled_since > options.poll_timeout_ms / 1000:
                raise TimeoutError(
                    f"{r.topic}-{r.partition}: no record past offset {position} within "
                    f"pollTimeoutMs={options.poll_timeout_ms} (range ends at {r.end})"
                )


def _consumer(options: ReadOptions) -> SyncConsumer:
    return SyncConsumer(
        **client_kwargs(options.security),
        bootstrap=options.bootstrap,
        client_id="mq-spark",
        auto_offset_reset="none",
        enable_auto_commit=False,
        max_partition_fetch_bytes=FETCH_BYTES,
        request_timeout_ms=options.request_timeout_ms,
    )


def _still_there(options: ReadOptions, r: OffsetRange, position: int) -> bool:
    """Whether ``r``'s topic exists and its partition still reaches ``position``. If not:
    :class:`DataLossError` naming the topic, or with ``failOnDataLoss=false`` a warning
    and False (the task ends its range there)."""
    tp = TopicPartition(r.topic, r.partition)

    def latest(admin: SyncAdmin) -> int | None:
        if r.topic not in admin.list_topics():
            return None
        return admin.list_offsets([tp], "latest")[tp]

    end = with_admin(options, f"checking that {r.topic!r} still exists", latest)
    if end is None:
        problem = f"topic {r.topic!r} was deleted while partition {r.partition} was read"
    elif end < position:
        problem = (
            f"{r.topic}-{r.partition} now ends at {end}, before offset {position} that "
            "was read (was the topic deleted and created again?)"
        )
    else:
        return True
    unread = f"offsets {position} to {r.end - 1} not read"
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{problem} ({unread}); set failOnDataLoss=false to carry on without it"
        )
    log.warning("mq-spark: %s (%s); failOnDataLoss=false: going on", problem, unread)
    return False


def with_admin(options: ReadOptions, what: str, call: Callable[[SyncAdmin], T]) -> T:
    """``call`` with a fresh admin client, retried (a new client each time) on retriable
    errors for up to ``retryTimeoutMs``."""

    def attempt() -> T:
        with admin_for(options) as admin:
            return call(admin)

    return retrying(what, options.retry_timeout_ms, attempt)


def admin_for(options: ReadOptions) -> SyncAdmin:
    return SyncAdmin(
        options.bootstrap,
        client_id="mq-spark",
        request_timeout_ms=options.request_timeout_ms,
        **client_kwargs(options.security),
    )

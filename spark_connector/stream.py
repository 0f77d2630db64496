"""``spark.readStream.format("mq")``: micro-batches of offset ranges.

An offset is ``{"topic": {"partition": next offset}}``, which Spark writes to
the query's checkpoint; a restarted query resumes from the last one
committed, so it reads every record exactly once into its micro-batches.
``latestOffset`` honours Spark's read limit (``maxOffsetsPerTrigger``, spread
over partitions by backlog) and, under ``Trigger.AvailableNow``, never goes
past the end the cluster had when the query started. A partition that appears
while the query runs (a topic grew) is read from its log start.

The reader runs on the driver, where Spark keeps it for the whole query; it
opens its admin connection on first use and is pickled without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from mq.client.sync import SyncAdmin
from spark_connector.options import ReadOptions
from spark_connector.ranges import (
    OffsetRange,
    Partitioned,
    from_json_dict,
    plan,
    rate_limit,
    resolve,
    to_json_dict,
)
from spark_connector.reader import (
    DataLossError,
    RangePartition,
    admin_for,
    list_offsets,
    partitions_of,
    read_range,
)


class MQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._admin: SyncAdmin | None = None
        self._target: Partitioned | None = None
        """Under Trigger.AvailableNow: the ends this query must reach and not pass."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    @property
    def admin(self) -> SyncAdmin:
        if self._admin is None:
            self._admin = admin_for(self.options)
        return self._admin

    def _offsets(self) -> tuple[list[tuple[str, int]], Partitioned, Partitioned]:
        partitions = partitions_of(self.admin, self.options.topics)
        earliest, latest = list_offsets(self.admin, partitions)
        return partitions, earliest, latest

    def initialOffset(self) -> dict[str, Any]:
        partitions, earliest, latest = self._offsets()
        start = resolve(self.options.starting, partitions, earliest, latest, "latest")
        return to_json_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._offsets()[2]

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json_dict(start)
        partitions, earliest, latest = self._offsets()
        gone = sorted(set(begin) - set(partitions))
        if gone and self.options.fail_on_data_loss:
            raise DataLossError(
                f"partitions {gone} are gone (topic deleted?); set failOnDataLoss=false to go on"
            )
        begin = {tp: begin.get(tp, earliest[tp]) for tp in partitions}
        if self._target is not None:
            latest = {tp: min(latest[tp], self._target.get(tp, earliest[tp])) for tp in latest}
        latest = {tp: max(latest[tp], begin[tp]) for tp in latest}  # never move backwards
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        elif not isinstance(limit, ReadAllAvailable):
            raise ValueError(f"the mq source supports no read limit like {limit!r}")
        return to_json_dict(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json_dict(self._offsets()[2])

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        begin, until = from_json_dict(start), from_json_dict(end)
        new = [tp for tp in until if tp not in begin]
        if new:  # partitions that appeared in this micro-batch: from their log start
            earliest = list_offsets(self.admin, new)[0]
            begin = {**begin, **{tp: min(earliest[tp], until[tp]) for tp in new}}
        return [RangePartition(*r) for r in plan(begin, until, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        r = OffsetRange(partition.topic, partition.partition, partition.start, partition.end)
        return read_range(self.options, r)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the query's checkpoint holds its offsets (as Kafka's source)."""

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

"""``spark.readStream.format("mq")``: micro-batches of offset ranges.

An offset is ``{"topic": {"partition": next offset}}``, which Spark writes to
the query's checkpoint; a restarted query resumes from the last one
committed, so it reads every record exactly once into its micro-batches.
``latestOffset`` honours Spark's read limit (``maxOffsetsPerTrigger``, spread
over partitions by backlog) and, under ``Trigger.AvailableNow``, never goes
past the end the cluster had when the query started. A partition that appears
while the query runs (a topic grew) is read from its log start.

A starting offset past a partition's end fails the query when it starts
(``failOnDataLoss=true``, the default), or starts that partition at its end
with a warning. A topic deleted while the query runs fails it, naming the
topic, or with ``failOnDataLoss=false`` the query carries on with the other
topics. Calls to the cluster that fail with retriable errors (a broker
restarting, a leader moving) are retried for up to ``retryTimeoutMs`` with a
new admin client.

The reader runs on the driver, where Spark keeps it for the whole query; it
opens its admin connection on first use and is pickled without it.
"""

from __future__ import annotations

# isort: off
import spark_connector._needs_extra  # noqa: F401  (first: a missing extra is one line)

# isort: on
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from mq.client.sync import SyncAdmin
from spark_connector.options import OptionError, ReadOptions
from spark_connector.planning import list_offsets, start_offsets, subscribed_partitions
from spark_connector.ranges import (
    OffsetRange,
    Partitioned,
    from_json_dict,
    rate_limit,
    to_json_dict,
)
from spark_connector.reader import (
    DataLossError,
    RangePartition,
    admin_for,
    plan_ranges,
    read_range,
)
from spark_connector.retry import retrying

T = TypeVar("T")

log = logging.getLogger(__name__)


class MQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._admin: SyncAdmin | None = None
        self._target: Partitioned | None = None
        """Under Trigger.AvailableNow: the ends this query must reach and not pass."""
        self._last_batch_at: float | None = None
        """When the last micro-batch was planned (``maxTriggerDelay``)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    @property
    def admin(self) -> SyncAdmin:
        if self._admin is None:
            self._admin = admin_for(self.options)
        return self._admin

    def _call(self, what: str, call: Callable[[SyncAdmin], T]) -> T:
        """``call(admin)``, retried with a new admin on retriable errors (``retryTimeoutMs``)."""
        return retrying(
            what, self.options.retry_timeout_ms, lambda: call(self.admin), self._drop_admin
        )

    def _drop_admin(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            try:
                admin.close(timeout_s=5)
            except Exception as exc:  # it failed already: closing is best effort
                log.debug("mq-spark: closing a failed admin client: %r", exc)

    def _offsets(self) -> tuple[list[tuple[str, int]], list[str], Partitioned, Partitioned]:
        """The partitions of the topics that exist, the topics that do not, and the
        (log start, end) of each partition."""

        def offsets(
            admin: SyncAdmin,
        ) -> tuple[list[tuple[str, int]], list[str], Partitioned, Partitioned]:
            partitions, missing = subscribed_partitions(admin, self.options)
            return partitions, missing, *list_offsets(admin, partitions)

        return self._call("listing the offsets of " + self.options.subscription, offsets)

    def initialOffset(self) -> dict[str, Any]:
        partitions, missing, earliest, latest = self._offsets()
        if missing:
            raise OptionError(f"topic(s) {missing} do not exist")
        start = self._call(
            "looking up the starting offsets of " + self.options.subscription,
            lambda a: start_offsets(a, self.options, partitions, earliest, latest, "latest"),
        )
        for tp, offset in sorted(start.items()):
            if offset > latest[tp]:
                where = (
                    f"startingOffsets asks {tp[0]}-{tp[1]} from {offset}, past its end {latest[tp]}"
                )
                if self.options.fail_on_data_loss:
                    raise DataLossError(
                        f"{where}; set failOnDataLoss=false to start there at its end instead"
                    )
                log.warning("mq-spark: %s; failOnDataLoss=false: starting at its end", where)
                start[tp] = latest[tp]
        return to_json_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._offsets()[3]

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json_dict(start)
        partitions, missing, earliest, latest = self._offsets()
        gone = sorted(set(begin) - set(partitions))
        if gone:
            deleted = sorted({topic for topic, _ in gone} & set(missing))
            what = (
                f"topic(s) {deleted} deleted while the query ran"
                if deleted
                else f"partitions {gone} are gone"
            )
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    f"{what}; set failOnDataLoss=false to carry on with the other topics"
                )
            log.warning("mq-spark: %s; failOnDataLoss=false: going on without them", what)
        begin = {tp: begin.get(tp, earliest[tp]) for tp in partitions}
        if self._target is not None:
            latest = {tp: min(latest[tp], self._target.get(tp, earliest[tp])) for tp in latest}
        latest = {tp: max(latest[tp], begin[tp]) for tp in latest}  # never move backwards
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        elif not isinstance(limit, ReadAllAvailable):
            raise ValueError(f"the mq source supports no read limit like {limit!r}")
        if self._held_back(begin, latest):
            return to_json_dict(begin)
        return to_json_dict(latest)

    def _held_back(self, begin: Partitioned, end: Partitioned) -> bool:
        """``minOffsetsPerTrigger``: whether to wait for more records before the next
        micro-batch (not for longer than ``maxTriggerDelay`` since the last one; never
        under Trigger.AvailableNow, which must reach its end)."""
        minimum = self.options.min_offsets_per_trigger
        now = time.monotonic()
        if self._last_batch_at is None:
            self._last_batch_at = now
        waiting = sum(end[tp] - begin.get(tp, end[tp]) for tp in end)
        if minimum is None or self._target is not None or waiting == 0:
            return False
        if (
            waiting < minimum
            and now - self._last_batch_at < self.options.max_trigger_delay_ms / 1000
        ):
            return True
        self._last_batch_at = now
        return False

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json_dict(self._offsets()[3])

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        begin, until = from_json_dict(start), from_json_dict(end)
        new = [tp for tp in until if tp not in begin]
        if new:  # partitions that appeared in this micro-batch: from their log start
            earliest = self._call("listing new partitions", lambda a: list_offsets(a, new)[0])
            begin = {**begin, **{tp: min(earliest[tp], until[tp]) for tp in new}}
        return [RangePartition(*r) for r in plan_ranges(self.options, begin, until)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):  # Spark's placeholder: nothing to read
            return iter(())
        r = OffsetRange(partition.topic, partition.partition, partition.start, partition.end)
        return read_range(self.options, r)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the query's checkpoint holds its offsets (as Kafka's source)."""

    def stop(self) -> None:
        self._drop_admin()


class RefusedStream(DataSourceStreamReader):
    """A stream whose options were refused: its first call raises the option's error.

    (Options a batch read accepts but a stream does not, such as ``endingOffsets``:
    ``load()`` cannot tell a stream from a batch read.)
    """

    def __init__(self, error: OptionError) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error

"""``df.write.format("mq")`` and ``df.writeStream.format("mq")``: rows become records.

The columns are those of Spark's Kafka sink: ``value`` (binary or string,
required), and optionally ``key`` (binary or string), ``headers``
(array<struct<key string, value binary>>), ``partition`` (int) and ``topic``
(string). As in Spark's Kafka sink, the ``topic`` option wins over a
``topic`` column: a DataFrame read from topic A (its rows carry ``topic =
A``) and written with ``option("topic", "B")`` goes to B, all of it; without
the option each row goes to its ``topic`` column (a null there is an error).
Other columns are ignored, so a DataFrame read from mq can be written back as
it is. The schema is checked on the driver, before any task runs.

Each Spark task produces its rows with an idempotent ``acks=all`` producer:
a retried request never duplicates, and the task ends only when every row is
acknowledged by all in-sync replicas. Unlike Spark's Kafka sink (at least
once), a task that Spark runs again (a retried task, a micro-batch replayed
after a crash) writes no row twice: its producer's identity is derived from the
query, the task and the micro-batch, and it writes only the rows that an
earlier attempt did not (compared by content, so a replay may see its rows in
another order: :mod:`spark_connector.exactly_once`, with its requirements).
"""

from __future__ import annotations

# isort: off
import spark_connector._needs_extra  # noqa: F401  (first: a missing extra is one line)

# isort: on
import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from mq.client.producer import Producer
from mq.client.sync import LoopThread
from spark_connector.exactly_once import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    TaskIdentity,
    place,
    stream_task_identity,
)
from spark_connector.options import OptionError, WriteOptions
from spark_connector.read_back import Resumer
from spark_connector.security import client_kwargs

log = logging.getLogger(__name__)

_BYTES = (BinaryType(), StringType())


@dataclass
class Written(WriterCommitMessage):
    rows: int


def check_schema(schema: StructType, options: WriteOptions) -> None:
    """Raise OptionError unless ``schema`` has the columns a record needs, typed right."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError(f"writing to mq needs a 'value' column; the columns are {list(fields)}")
    _expect(fields, "value", _BYTES, "binary or string")
    _expect(fields, "key", _BYTES, "binary or string")
    _expect(fields, "partition", (IntegerType(),), "int")
    _expect(fields, "topic", (StringType(),), "string")
    if "headers" in fields:
        headers = fields["headers"]
        element = headers.elementType if isinstance(headers, ArrayType) else None
        names = (
            [(f.name, f.dataType) for f in element.fields]
            if isinstance(element, StructType)
            else []
        )
        if names != [("key", StringType()), ("value", BinaryType())]:
            raise OptionError(
                f"column 'headers' must be array<struct<key: string, value: binary>>, "
                f"not {headers.simpleString()}"
            )
    if options.topic is None and "topic" not in fields:
        raise OptionError("writing to mq needs option 'topic' or a 'topic' column")


def _expect(fields: dict[str, DataType], name: str, types: Sequence[DataType], what: str) -> None:
    if name in fields and fields[name] not in types:
        raise OptionError(f"column {name!r} must be {what}, not {fields[name].simpleString()}")


class MQBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.write_id = uuid.uuid4().hex
        """Made once on the driver: every attempt of a task of this write shares it."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        context = TaskContext.get()
        identity = (
            None
            if context is None
            else TaskIdentity(f"write {self.write_id}", context.partitionId(), 0)
        )
        return Written(produce(self.options, iterator, identity))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, Written))
        log.info("mq: %d rows written to %s", rows, self.options.topic or "the topic column")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, Written))
        log.warning("mq: the write failed; %d rows of tasks that finished stay written", rows)


class MQStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        context = TaskContext.get()
        identity = None
        if context is not None:
            identity = stream_task_identity(
                context.partitionId(),
                context.getLocalProperty(QUERY_ID_PROPERTY),
                context.getLocalProperty(BATCH_ID_PROPERTY),
            )
        if identity is None:
            log.warning("mq: no streaming query id or batch id in the task: at-least-once write")
        return Written(produce(self.options, iterator, identity))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to finish: every row was acknowledged before its task ended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("mq: micro-batch %d failed; rows of tasks that finished stay written", batchId)


def produce(
    options: WriteOptions, batches: Iterator[pa.RecordBatch], identity: TaskIdentity | None = None
) -> int:
    """Send every row of ``batches``; return once all are acknowledged (the row count).

    With an ``identity``, rows an earlier attempt of the task wrote are not written
    again (:mod:`spark_connector.exactly_once`). One Arrow batch is sent while the
    previous one's acknowledgements are awaited, so the producer always has a
    batch to fill; the first failure fails the task.
    """
    thread = LoopThread("mq-spark-writer")
    try:
        producer = thread.run(_started(options, None if identity is None else identity.producer()))
        resumer = None
        try:
            if identity is not None:
                resumer = Resumer(producer, identity.producer(), options)
            count = 0
            pending: list[Any] = []
            for batch in batches:
                rows = records_of(batch, options.topic)
                if resumer is not None:
                    rows = thread.run(_unwritten(resumer, rows))
                sent = thread.run(_send(producer, rows))
                thread.run(_acknowledged(pending))
                pending = sent
                count += len(rows)
            thread.run(_acknowledged(pending))
        finally:
            thread.run(producer.stop(), 60)
        if resumer is not None:
            resumer.replay.check(count)
            if resumer.replay.skipped:
                log.info(
                    "mq: %d rows were written by an earlier attempt of this task: skipped",
                    resumer.replay.skipped,
                )
        return count
    finally:
        thread.close()


async def _unwritten(resumer: Resumer, rows: list[Row]) -> list[Row]:
    """The rows no earlier attempt wrote, each with its partition (by content)."""
    out: list[Row] = []
    known = resumer.partitions
    written_before = resumer.replay.written_before
    for topic, value, key, headers, partition in rows:
        partitions = known.get(topic) or await resumer.partitions_of(topic)
        placed = place(key, value, headers, partition, partitions)
        if not written_before(topic, placed, key, value, headers):
            out.append((topic, value, key, headers, placed))
    return out


Row = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]


def records_of(batch: pa.RecordBatch, topic: str | None) -> list[Row]:
    """(topic, value, key, headers, partition) for each row of ``batch``: every row to
    ``topic`` (the option) if given, else to the row's ``topic`` column."""
    n = batch.num_rows
    names = batch.schema.names
    values = _binary(batch.column(names.index("value")))
    keys = _binary(batch.column(names.index("key"))) if "key" in names else [None] * n
    partitions = (
        batch.column(names.index("partition")).to_pylist() if "partition" in names else [None] * n
    )
    if "headers" in names:
        headers = [
            [(h["key"], h["value"]) for h in hs] if hs else []
            for hs in batch.column(names.index("headers")).to_pylist()
        ]
    else:
        headers = [[] for _ in range(n)]
    if topic is not None:  # the option wins over the column, as in Kafka's sink
        topics = [topic] * n
    else:
        topics = batch.column(names.index("topic")).to_pylist()
        if None in topics:
            raise OptionError("a row has a null 'topic' and there is no 'topic' option")
    return list(zip(topics, values, keys, headers, partitions, strict=True))


def _binary(column: pa.Array) -> list[bytes | None]:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()  # type: ignore[no-any-return]


async def _started(options: WriteOptions, identity: tuple[int, int] | None) -> Producer:
    producer = Producer(
        options.bootstrap,
        client_id="mq-spark",
        acks="all",
        enable_idempotence=True,
        linger_ms=options.linger_ms,
        batch_size=options.batch_size,
        compression_type=options.compression,
        request_timeout_ms=options.request_timeout_ms,
        fixed_identity=identity,
        **client_kwargs(options.security),
    )
    await producer.start()
    return producer


async def _send(producer: Producer, rows: list[Row]) -> list[Any]:
    send = producer.send
    return [await send(t, v, k, h, p) for t, v, k, h, p in rows]


async def _acknowledged(futures: list[Any]) -> None:
    for future in futures:
        await future

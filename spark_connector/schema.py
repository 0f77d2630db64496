"""The rows of the ``mq`` source, as Spark and as Arrow see them.

The schema is the one of Spark's Kafka source, so that a job written for
Kafka reads mq unchanged. Records become Arrow record batches column by
column (one C-level transpose, then one ``pyarrow.array`` per column): the
Python work per record is the decoding the client already does, nothing more.
"""

from __future__ import annotations

# isort: off
import spark_connector._needs_extra  # noqa: F401  (first: a missing extra is one line)

# isort: on
from collections.abc import Sequence
from typing import Final

import pyarrow as pa

from mq.client.types import ConsumerRecord

SCHEMA_DDL: Final = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int, "
    "headers array<struct<key: string, value: binary>>"
)
"""The DataFrame schema with ``includeHeaders=true``, as Spark's Kafka source has it."""
SCHEMA_DDL_NO_HEADERS: Final = SCHEMA_DDL.rsplit(", headers", 1)[0]
"""The DataFrame schema by default: Kafka's source has ``headers`` only with
``includeHeaders=true``."""

HEADERS_TYPE: Final = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA: Final = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", HEADERS_TYPE),
    ]
)
ARROW_SCHEMA_NO_HEADERS: Final = ARROW_SCHEMA.remove(ARROW_SCHEMA.get_field_index("headers"))
_MS: Final = pa.timestamp("ms", tz="UTC")
_NO_HEADERS: Final = pa.array([], HEADERS_TYPE.value_type)


def schema_ddl(include_headers: bool) -> str:
    """The DataFrame schema of a read, with or without ``headers``."""
    return SCHEMA_DDL if include_headers else SCHEMA_DDL_NO_HEADERS


def without_headers(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` (in ARROW_SCHEMA) without its ``headers`` column (no copy)."""
    return pa.RecordBatch.from_arrays(batch.columns[:-1], schema=ARROW_SCHEMA_NO_HEADERS)


def to_arrow(records: Sequence[ConsumerRecord]) -> pa.RecordBatch:
    """One record batch of ``records`` (all of one topic-partition) in ARROW_SCHEMA."""
    count = len(records)
    topics, partitions, offsets, timestamps, keys, values, headers, types = zip(
        *records, strict=True
    )
    if any(headers):
        header_column = pa.array(headers, HEADERS_TYPE)
    else:  # the usual case: no list to walk, just count-many empty lists
        header_column = pa.ListArray.from_arrays(
            pa.repeat(0, count + 1).cast(pa.int32()), _NO_HEADERS
        )
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.repeat(pa.scalar(topics[0], pa.string()), count),
            pa.repeat(pa.scalar(partitions[0], pa.int32()), count),
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, _MS).cast(ARROW_SCHEMA.field("timestamp").type),
            pa.array(types, pa.int32()),
            header_column,
        ],
        schema=ARROW_SCHEMA,
    )

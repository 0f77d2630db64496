"""Spark-side helpers of ``test_security_e2e.py``: rows to write and read back, options
on a reader or writer, a failing action's text and time, a plan recorder, the README's
blocks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

PARTITIONS: Final = 3
"""Partitions of the topics the round trips write (rows name them in a column)."""


SCHEMA: Final = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
        StructField("partition", IntegerType()),
    ]
)

Record = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
"""(partition, key, value, headers)."""


def records(count: int) -> list[Record]:
    """Keys (some null), values (some empty, bytes of every value), headers (some)."""
    return [
        (
            i % PARTITIONS,
            None if i % 5 == 0 else b"key-%d" % (i % 7),
            b"" if i % 11 == 0 else b"value-%d-" % i + bytes(range(256))[i % 256 :],
            ((("n", b"%d" % i), ("empty", None)) if i % 4 == 0 else ()),
        )
        for i in range(count)
    ]


def frame(spark: SparkSession, rows: list[Record]) -> DataFrame:
    return spark.createDataFrame(
        [
            (key, value, [{"key": k, "value": v} for k, v in headers], p)
            for p, key, value, headers in rows
        ],
        SCHEMA,
    )


def read_back(df: DataFrame) -> list[tuple[Record, int]]:
    """(record, offset) of every row read."""
    out = []
    for r in df.collect():
        headers = tuple(
            (h["key"], None if h["value"] is None else bytes(h["value"])) for h in r.headers
        )
        key = None if r.key is None else bytes(r.key)
        value = None if r.value is None else bytes(r.value)
        out.append(((r.partition, key, value, headers), r.offset))
    return out


def with_options(builder: Any, options: dict[str, str]) -> Any:
    for name, value in options.items():
        builder = builder.option(name, value)
    return builder


def failure(action: Callable[[], object]) -> tuple[str, float]:
    """The text of the exception ``action`` raises, and how long it took."""
    started = time.monotonic()
    with pytest.raises((PySparkException, Py4JJavaError)) as caught:
        action()
    return str(caught.value), time.monotonic() - started


class PlanRecorder:
    """A ``QueryExecutionListener`` (through py4j's callback server): the whole plan,
    parsed to physical, as ``EXPLAIN EXTENDED`` prints it, of every action."""

    def __init__(self) -> None:
        self.plans: list[str] = []

    def onSuccess(self, name: str, execution: Any, duration_ns: int) -> None:
        self.plans.append(execution.toString())

    def onFailure(self, name: str, execution: Any, exception: Any) -> None:
        self.plans.append(execution.toString())

    class Java:
        implements: Final = ["org.apache.spark.sql.util.QueryExecutionListener"]


def readme_block(text: str, language: str) -> str:
    """The first ``language`` block of the README's "Spark over SASL_SSL"."""
    section = text[text.index("### Spark over SASL_SSL") :]
    block = section[section.index(f"```{language}\n") + len(f"```{language}\n") :]
    return block[: block.index("```")]


def swapped(block: str, swaps: dict[str, str]) -> str:
    for old, new in swaps.items():
        assert old in block, f"the README's example no longer has {old}"
        block = block.replace(old, new)
    return block

"""W7's yardstick: a Python data source that serves rows already in memory.

``format("mq_memory")`` reads a pickle of rows (written by :mod:`benchmarks.spark`
before the clock starts) once per Python worker and keeps them, so that a
timed read costs only what the Python Data Source API itself costs: Spark
asking the worker, the worker handing over rows, Spark turning them into
its own. Option ``mode``: ``rows`` yields the rows as tuples (Spark converts
them to Arrow in the worker), ``arrow`` yields ready Arrow record batches
(what the ``mq`` source yields: the API's fastest path).
"""

from __future__ import annotations

import gc
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_connector.schema import ARROW_SCHEMA, SCHEMA_DDL

_LOADED: dict[str, dict[int, Any]] = {}
"""Per worker process: path -> partition -> rows (or Arrow batches)."""


def _rows(path: str, mode: str) -> dict[int, Any]:
    key = f"{path}:{mode}"
    if key not in _LOADED:
        by_partition: dict[int, list[tuple[Any, ...]]] = pickle.loads(Path(path).read_bytes())
        if mode == "arrow":
            _LOADED[key] = {p: _batches(rows) for p, rows in by_partition.items()}
        else:
            _LOADED[key] = dict(by_partition)
        # Spark reuses its Python workers: without this, every later read in this
        # worker (the mq source's too) pays for the collector walking a million rows
        gc.collect()
        gc.freeze()
    return _LOADED[key]


def _batches(rows: list[tuple[Any, ...]], size: int = 8192) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, len(rows), size):
        columns = list(zip(*rows[start : start + size], strict=True))
        out.append(
            pa.RecordBatch.from_arrays(
                [pa.array(c, f.type) for c, f in zip(columns, ARROW_SCHEMA, strict=True)],
                schema=ARROW_SCHEMA,
            )
        )
    return out


class _Reader(DataSourceReader):
    def __init__(self, path: str, mode: str, partitions: int) -> None:
        self.path, self.mode, self.count = path, mode, partitions

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return iter(_rows(self.path, self.mode)[partition.value])


class MemorySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "mq_memory"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(self.options["path"], self.options["mode"], int(self.options["partitions"]))

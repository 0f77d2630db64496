"""The ``mq`` data source: Spark's entry point, handing out readers and writers."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_connector.options import OptionError, parse_read_options, parse_write_options
from spark_connector.reader import MQBatchReader
from spark_connector.schema import SCHEMA_DDL
from spark_connector.stream import MQStreamReader
from spark_connector.writer import MQBatchWriter, MQStreamWriter, check_schema


class MQDataSource(DataSource):
    """``format("mq")``: topics of an mq cluster as a table, batch or streaming.

    Options are checked when the reader or writer is made, so that a
    mistake fails the query at planning time (see :mod:`spark_connector.options`).
    """

    @classmethod
    def name(cls) -> str:
        return "mq"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return MQBatchReader(parse_read_options(self.options, "batch"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MQStreamReader(parse_read_options(self.options, "stream"))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("an mq topic is a log: it can be appended to, not overwritten")
        options = parse_write_options(self.options)
        check_schema(schema, options)
        return MQBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_write_options(self.options)
        check_schema(schema, options)
        return MQStreamWriter(options)

"""The ``mq`` data source: Spark's entry point, handing out readers and writers."""

from __future__ import annotations

# isort: off
import spark_connector._needs_extra  # noqa: F401  (first: a missing extra is one line)

# isort: on
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
from spark_connector.schema import schema_ddl
from spark_connector.stream import MQStreamReader, RefusedStream
from spark_connector.writer import MQBatchWriter, MQStreamWriter, check_schema


class MQDataSource(DataSource):
    """``format("mq")``: topics of an mq cluster as a table, batch or streaming.

    A read's options are checked where Spark resolves the schema, so that a
    mistake fails ``load()`` with one line naming the option, for streams too
    (see :mod:`spark_connector.options`); a writer's when it is made, before
    any task runs.
    """

    @classmethod
    def name(cls) -> str:
        return "mq"

    def schema(self) -> str:
        """Called by ``load()`` (batch or stream; not by writes): the options are checked
        here, and ``includeHeaders`` says whether there is a ``headers`` column."""
        return schema_ddl(parse_read_options(self.options, "batch").include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return MQBatchReader(parse_read_options(self.options, "batch"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            return MQStreamReader(parse_read_options(self.options, "stream"))
        except OptionError as exc:
            # PySpark's streaming runner hides an error raised here behind its own
            # UnboundLocalError ('reader'): hand it over at the query's first call
            return RefusedStream(exc)

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

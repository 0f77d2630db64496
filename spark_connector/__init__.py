"""PySpark data source ``mq``: read topics as a DataFrame (batch or streaming), write rows.

::

    import spark_connector
    spark_connector.register(spark)
    df = spark.read.format("mq").option("topic", "events").load()

Needs PySpark >= 4.2 and pyarrow (``pip install 'mq[spark]'``). Spark runs the
reader and writer in Python workers on every executor, so this package (and
``mq``) must be importable there; see the README's Spark section.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Make ``format("mq")`` available in ``spark``'s reads and writes."""
    from spark_connector.source import MQDataSource

    spark.dataSource.register(MQDataSource)

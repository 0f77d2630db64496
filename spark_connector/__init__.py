"""PySpark data source ``mq``: read topics as a DataFrame (batch or streaming), write rows.

::

    import spark_connector
    spark_connector.register(spark)
    df = spark.read.format("mq").option("topic", "events").load()

Needs PySpark >= 4.2, pyarrow and numpy (from a checkout: ``pip install -e
'.[spark]'``) and Java 17+ for Spark itself. Spark runs the reader and writer in
Python workers on every executor, so this package (and ``mq``) must be
importable there; see the README's Spark section. Without the extra,
:func:`register` (and the pipeline's commands) fail with one line saying what to
install (:class:`MissingExtraError`), not a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MissingExtraError", "register", "require_extra"]

SPARK_EXTRA = ("pyspark", "pyarrow", "numpy")
"""The modules of the ``spark`` extra that the connector and the pipeline import."""
INSTALL_HINT = "pip install -e '.[spark]' in the mq checkout (or pip install 'mq[spark]')"


class MissingExtraError(ImportError):
    """A module of the ``spark`` extra is not installed; the message says what to run."""


def require_extra(
    modules: tuple[str, ...] = SPARK_EXTRA, *, what: str = "mq's Spark connector"
) -> None:
    """Raise :class:`MissingExtraError` (one line) if any of ``modules`` is not installed."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"{what} needs {', '.join(missing)}, not installed here: {INSTALL_HINT}"
        )


def register(spark: SparkSession) -> None:
    """Make ``format("mq")`` available in ``spark``'s reads and writes."""
    require_extra()
    from spark_connector.source import MQDataSource

    spark.dataSource.register(MQDataSource)

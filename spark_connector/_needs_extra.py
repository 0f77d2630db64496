"""Imported first by the connector's modules that need the ``spark`` extra.

Spark's Python workers import these modules directly (unpickling a reader or
a writer), not through :func:`spark_connector.register`: without the extra,
the import fails here with one line saying what to install
(:class:`~spark_connector.MissingExtraError`), not with a bare
``ModuleNotFoundError`` from deep inside pyarrow's or Spark's imports.
"""

from spark_connector import require_extra

require_extra()

"""A log-aggregation pipeline on mq and Spark: web access logs to per-minute stats.

* :mod:`.events`: the access-log line format, its parser and the reference
  aggregation (pure Python: what the Spark job must output).
* :mod:`.generator`: deterministic simulated traffic, produced into a topic.
* :mod:`.job`: the structured-streaming job (format ``mq`` in, ``mq`` and
  Parquet out).
* ``python -m spark_connector.pipeline generate | run | show``: the CLI.
"""

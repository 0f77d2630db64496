"""PySpark Python data source ``mq`` (reader and writer over the public client API)."""

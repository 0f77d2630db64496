"""The ``mq`` command line."""

"""The broker: topics and partitions (broker.py), request handlers, and the TCP server."""

"""mq's storage engine: segments, indexes, partition logs, recovery, retention, compaction.

Three layers, each with its concurrency rule in its docstring (recovery on open lives in
:mod:`mq.storage.recovery`):
:class:`~mq.storage.segment.Segment` (one file and its indexes) →
:class:`~mq.storage.log.Log` (ordered segments, roll, retention, recovery) →
:class:`~mq.storage.writer.LogWriter` (the one asyncio task that appends).
The record format it stores is :mod:`mq.records`'. Nothing here opens a socket or
knows about the broker.
"""

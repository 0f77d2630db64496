"""Queues on the log: share groups (SQS semantics), pure bookkeeping.

:mod:`mq.queues.share_partition` is the per-partition state machine (leases,
redelivery, dead letters, delays, FIFO keys, dedup); :mod:`mq.queues.headers`
names the record headers queues use. The broker side is :mod:`mq.broker.queues`.
"""

"""Quotas and fair sharing, pure: buckets, quota entities, the fair scheduler.

Nothing here does I/O or knows the broker (``../shared/STYLE.md``, 10): the
broker's :mod:`mq.broker.quotas` feeds these the clock and the traffic.
"""

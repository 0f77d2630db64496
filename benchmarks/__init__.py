"""Benchmarks of mq (see ../shared/BENCHMARKS.md); run each as ``python -m benchmarks.NAME``.

Every benchmark process keeps freed memory for reuse
(:func:`mq.allocator.keep_freed_memory`, which ``mq serve`` applies to the
broker by default): the clients measured here, mq's and the peers', allocate
a buffer per batch and frame, and fresh pages cost more than the work on them.
"""

from mq.allocator import keep_freed_memory

keep_freed_memory()

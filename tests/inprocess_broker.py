"""A real broker started inside the test's event loop, for tests that check its state.

:class:`mq.broker.server.Server` over a :class:`mq.broker.broker.Broker`, listening on
127.0.0.1 port 0 with a tmp data directory: the same objects ``mq serve`` runs, so a
test can send real requests and then look at the coordinator's groups or the share
manager's sessions (counts, not timings).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mq.broker.broker import Broker
from mq.broker.config import BrokerConfig
from mq.broker.server import Server

SEGMENT_BYTES = 16 << 20
"""Small segments: a test's broker preallocates no 1 GiB files."""


@dataclass
class Running:
    server: Server
    bootstrap: str

    @property
    def broker(self) -> Broker:
        return self.server.broker

    def server_address(self, listener: str) -> str:
        """``HOST:PORT`` of one of the broker's listeners (by name: ``SASL_SSL``...)."""
        host, port = self.server.bound[listener]
        return f"{host}:{port}"


@asynccontextmanager
async def running_broker(data_dir: Path, **settings: Any) -> AsyncIterator[Running]:
    """A started broker with these :class:`BrokerConfig` settings; stopped on exit."""
    config = BrokerConfig(data_dir=data_dir, port=0, **settings)
    config = replace(config, log=config.log.with_overrides({"segment.bytes": SEGMENT_BYTES}))
    server = Server(Broker(config))
    host, port = await server.start()
    try:
        yield Running(server, f"{host}:{port}")
    finally:
        await server.stop()

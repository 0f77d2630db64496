"""A real ``mq serve --http-port 0`` process serving the console, for the browser tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from broker_process import BrokerProcess

SEGMENT_BYTES = 16 << 20
"""Small segments: the test's broker preallocates no 1 GiB files."""


@dataclass
class ConsoleServer:
    url: str
    """The console's address: ``http://HOST:PORT`` of the broker's HTTP listener."""
    bootstrap: str


@asynccontextmanager
async def console_server(data_dir: Path) -> AsyncIterator[ConsoleServer]:
    process = BrokerProcess(data_dir, segment_bytes=SEGMENT_BYTES, http_port=0)
    await asyncio.to_thread(process.start)
    try:
        yield ConsoleServer(process.http_url, process.bootstrap)
    finally:
        await asyncio.to_thread(process.stop)

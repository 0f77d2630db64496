"""A broker serving the console, for the browser tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from inprocess_broker import running_broker

from mq.http import admin_api, console_routes


@dataclass
class ConsoleServer:
    url: str
    bootstrap: str


@asynccontextmanager
async def console_server(data_dir: Path) -> AsyncIterator[ConsoleServer]:
    async with running_broker(data_dir) as running:
        app = web.Application()
        admin_api.add_routes(app, running.broker)
        console_routes.add_routes(app, running.broker)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            host, port = runner.addresses[0][:2]
            yield ConsoleServer(f"http://{host}:{port}", running.bootstrap)
        finally:
            await runner.cleanup()

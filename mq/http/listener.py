"""The HTTP listener: serves :func:`mq.http.app.make_app` on the broker's host.

HTTPS with the binary TLS listeners' certificate and context
(:func:`mq.broker.listeners.server_context`, client certificates not asked for: the
HTTP listener authenticates with Basic) when :mod:`mq.broker.http_security` says so.

Bound to the main listener's host (so a broker on 127.0.0.1 exposes nothing
else), on ``http_port`` (0: a free port, see :attr:`HttpListener.port`). It runs
on the broker's event loop: its handlers must stay short (reads of in-memory
state, no blocking calls).
"""

from __future__ import annotations

import logging
import ssl

from aiohttp import web

from mq.broker import http_security
from mq.broker.authorizer import Authorizer
from mq.broker.broker import Broker
from mq.broker.listeners import server_context
from mq.http.app import make_app

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 2.0
"""How long stopping waits for HTTP requests in progress (scrapes take milliseconds)."""
KEEPALIVE_TIMEOUT_S = 75.0
"""An idle keep-alive HTTP connection is closed after this long (aiohttp's default;
a scraper every 15 s keeps one connection)."""


class HttpListener:
    """The broker's HTTP server; :meth:`start` binds, :meth:`stop` closes."""

    def __init__(
        self, broker: Broker, host: str, port: int, authorizer: Authorizer | None = None
    ) -> None:
        self.broker = broker
        self.authorizer = authorizer
        self.tls = http_security.serves_tls(broker.config)
        """Whether it serves HTTPS (:mod:`mq.broker.http_security`)."""
        self.host = host
        self.port = port
        """The port asked for until :meth:`start`; then the port actually bound."""
        self._runner: web.AppRunner | None = None

    async def start(self) -> tuple[str, int]:
        """Bind and serve; the address actually bound."""
        runner = web.AppRunner(
            make_app(self.broker, self.authorizer),
            access_log=None,  # a scraper every second must not fill the log
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            keepalive_timeout=KEEPALIVE_TIMEOUT_S,
            handle_signals=False,
        )
        await runner.setup()
        self._runner = runner
        tls = None
        if self.tls:
            tls = server_context(self.broker.config)
            tls.verify_mode = ssl.CERT_NONE  # no client certificate asked: Basic says who
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True, ssl_context=tls)
        await site.start()
        self.port = runner.addresses[0][1]
        log.info(
            "mq broker %d HTTP%s listening on %s:%d",
            self.broker.node_id,
            "S" if self.tls else "",
            self.host,
            self.port,
        )
        return self.host, self.port

    def open_connections(self) -> int:
        """HTTP connections open now (keep-alive ones included)."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

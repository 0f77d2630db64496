"""The web console: static files (``mq/http/console/``) served at ``/`` and ``/console/``.

Plain HTML, ES modules and CSS, no build step and nothing loaded from elsewhere:
the pages read the JSON admin API (:mod:`mq.http.admin_api`) and poll it every
two seconds. Read-only: actions wait for the HTTP listener's ACLs.

Thread safety: one event loop (the broker's).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

from aiohttp import web

if TYPE_CHECKING:
    from mq.broker.broker import Broker

STATIC_DIR: Final = Path(__file__).with_name("console")
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
"""Only this listener's own files and API (a value shown in the browser cannot load or
run anything), revalidated on each load so an upgraded broker's pages are seen."""


async def _index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers=SECURITY_HEADERS)


async def _console_headers(request: web.Request, response: web.StreamResponse) -> None:
    if request.path.startswith("/console/"):
        response.headers.update(SECURITY_HEADERS)


def add_routes(app: web.Application, broker: Broker) -> None:
    """Serve the console's pages (``broker`` unused: the pages ask the admin API)."""
    app.on_response_prepare.append(_console_headers)
    app.router.add_get("/", _index)
    app.router.add_static("/console/", STATIC_DIR, follow_symlinks=False)

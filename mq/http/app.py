"""The broker's web application: every route group of :mod:`mq.http` in one app.

A route group is a module with ``add_routes(app, broker)``; :data:`ROUTE_GROUPS`
lists them in the order their routes are added (a later group cannot shadow an
earlier group's path: aiohttp refuses a duplicate route).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from mq.broker.authorizer import Authorizer
from mq.broker.broker import Broker
from mq.http import admin_api, auth, console_routes, health, metrics

BROKER_KEY = web.AppKey("broker", Broker)
"""``request.app[BROKER_KEY]``: the broker an HTTP handler serves."""

RouteGroup = Callable[[web.Application, Broker], None]

ROUTE_GROUPS: list[RouteGroup] = [
    health.add_routes,
    metrics.add_routes,
    admin_api.add_routes,  # the console's JSON API (/api/...)
    console_routes.add_routes,  # the web console (/, /console/...)
]
"""Each module's ``add_routes``; append a group here to serve it."""


def make_app(broker: Broker, authorizer: Authorizer | None = None) -> web.Application:
    """The application serving ``broker``: every route group's routes, behind the
    authentication and ACLs of :mod:`mq.http.auth` when the broker's security asks for
    them (then ``authorizer``, the broker's, is required)."""
    middleware = auth.make_middleware(broker, authorizer)
    app = web.Application(
        client_max_size=MAX_REQUEST_BYTES, middlewares=[middleware] if middleware else []
    )
    app[BROKER_KEY] = broker
    for add_routes in ROUTE_GROUPS:
        add_routes(app, broker)
    return app


MAX_REQUEST_BYTES = 1 << 20
"""Largest HTTP request body accepted (aiohttp's default, stated): the listener serves
reads and small admin requests, never record payloads."""

"""The broker's HTTP listener: metrics, health, and (issue 21) the console and its API.

One :class:`aiohttp.web.Application` per broker (:func:`mq.http.app.make_app`),
served by :class:`mq.http.listener.HttpListener` on the main listener's host
when ``http_port`` is set. Each module adds its routes with an
``add_routes(app, broker)`` function; handlers read the broker's state on the
event loop (the broker's own thread), never block it and never write it.
When the broker's security is on, :mod:`mq.http.auth` authenticates and
authorizes every request before its handler (handlers never check permissions).
"""

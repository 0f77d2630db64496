"""The JSON admin API the web console reads (read-only), on the broker's HTTP listener.

* ``GET /api/cluster``: brokers (each with its HTTP URL), controller, the partitions
  under-replicated or offline;
* ``GET /api/topics``: topics with their partition count and health;
* ``GET /api/topics/{topic}``: per partition leader, replicas, ISR, start and end
  offsets, size, consumed offsets; the topic's configs;
* ``GET /api/topics/{topic}/partitions/{p}/records?limit=N``: the last N records;
* ``GET /api/groups``: consumer groups and their states;
* ``GET /api/groups/{group}``: members, assignment, committed offset and lag per partition;
* ``GET /api/queues``: per queue visible / in flight / delayed / dead-lettered, oldest age.

Any broker answers for the whole cluster (:mod:`mq.http.admin_data` says where each
field comes from). Errors are JSON ``{"error": <class>, "message": ...}``: 404 for a
topic, partition or group that does not exist, 400 for a bad parameter, 503 when
the broker that holds the data could not answer. Every answer is bounded (the
constants of :mod:`mq.http.admin_data`, :mod:`mq.http.admin_queues` and
:mod:`mq.http.browse`). Rates are left to the reader: the answers carry ``time_ms``
and cumulative offsets and sizes, and the console differentiates successive polls.

Actions (create, delete, reset offsets, redrive) are not served yet. When the
broker's security is on, every route needs a user and the ACLs the binary APIs
reading the same data need (:mod:`mq.http.auth`, :mod:`mq.http.auth_rules`):
handlers never check permissions; the lists are cut to the principal after the
shared answer.

Answers are shared (:mod:`mq.http.shared`): one computation per path and query
per second, however many consoles poll it.

Thread safety: one event loop (the broker's).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from mq.errors import (
    GroupIdNotFoundError,
    InvalidRequestError,
    MQError,
    UnknownTopicOrPartitionError,
)
from mq.http import admin_data, admin_queues, auth, browse
from mq.http.shared import SharedAnswers

if TYPE_CHECKING:
    from mq.broker.broker import Broker

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

NOT_FOUND = (UnknownTopicOrPartitionError, GroupIdNotFoundError)


def _json(data: Any, status: int = 200) -> web.Response:
    response = web.json_response(data, status=status)
    response.headers["Cache-Control"] = "no-store"
    return response


def _failure(exc: BaseException) -> web.Response:
    if isinstance(exc, NOT_FOUND):
        status = 404
    elif isinstance(exc, InvalidRequestError):
        status = 400
    elif isinstance(exc, TimeoutError):
        status = 504
    else:
        status = 503
    message = exc.message if isinstance(exc, MQError) else str(exc) or type(exc).__name__
    return _json({"error": type(exc).__name__, "message": message}, status)


def _int_param(name: str, value: str | None, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidRequestError(f"{name} must be an integer, got {value!r}") from None


def add_routes(app: web.Application, broker: Broker) -> None:
    """Add the ``/api/...`` routes, answering from ``broker``."""
    shared = SharedAnswers()

    def _guarded(answer: Callable[[web.Request], Awaitable[Any]]) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            # the key names what the answer depends on: other query parameters (a
            # client's cache buster) do not make it computed again
            key = f"{request.path}?limit={request.query.get('limit', '')}"
            try:
                shared_answer = await shared.get(key, lambda: answer(request))
                # a listing is cut to what the principal may see (mq.http.auth_rules)
                return _json(auth.cut_to_principal(request, shared_answer))
            except (MQError, OSError, TimeoutError) as exc:
                return _failure(exc)

        return handle

    async def cluster(request: web.Request) -> Any:
        return admin_data.cluster(broker)

    async def topics(request: web.Request) -> Any:
        return admin_data.topics(broker)

    async def topic(request: web.Request) -> Any:
        return await admin_data.topic(broker, request.match_info["topic"])

    async def records(request: web.Request) -> Any:
        index = _int_param("partition", request.match_info["partition"], 0)
        limit = _int_param("limit", request.query.get("limit"), browse.DEFAULT_RECORDS)
        return await browse.last_records(broker, request.match_info["topic"], index, limit)

    async def groups(request: web.Request) -> Any:
        return await admin_data.groups(broker)

    async def group(request: web.Request) -> Any:
        return await admin_data.group(broker, request.match_info["group"])

    async def queues(request: web.Request) -> Any:
        return await admin_queues.queues(broker)

    app.add_routes(
        [
            web.get("/api/cluster", _guarded(cluster)),
            web.get("/api/topics", _guarded(topics)),
            web.get("/api/topics/{topic}", _guarded(topic)),
            web.get("/api/topics/{topic}/partitions/{partition}/records", _guarded(records)),
            web.get("/api/groups", _guarded(groups)),
            web.get("/api/groups/{group}", _guarded(group)),
            web.get("/api/queues", _guarded(queues)),
        ]
    )

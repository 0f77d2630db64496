"""``/healthz`` and ``/readyz``: is the process serving, and should traffic come here.

* ``/healthz`` answers 200 as long as the event loop runs (a liveness probe: a
  broker that stopped answering it should be restarted);
* ``/readyz`` answers 200 when the broker is registered in the cluster, leads
  every partition the cluster says it leads (none of them offline), and is in
  the ISR of every partition it follows (caught up); 503 otherwise. Both bodies
  are JSON with the reasons, so a probe's failure says why.

Both read the broker's state in place: O(partitions) per call, no I/O.

Both stay anonymous when the listener authenticates (:mod:`mq.http.auth`: an
orchestrator's probe has no password), and then say nothing a stranger should not
learn: ``/readyz``'s reasons are counted by kind (``3 partitions: follower not caught
up``) without topic names or error details (:func:`summary`).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from mq.broker.broker import Broker
from mq.broker.http_security import http_auth_on

MAX_REASONS = 20
"""Reasons listed in a /readyz answer (with the count of the others): a broker with
10,000 lagging followers answers a few hundred bytes, not a megabyte."""


def readiness(broker: Broker) -> list[str]:
    """Why this broker is not ready (empty: ready)."""
    reasons: list[str] = []
    if broker.broker_epoch == 0:
        reasons.append("not registered in the cluster")
    node = broker.node_id
    for (topic, index), state in broker.view.partitions.items():
        if node not in state.replicas:
            continue
        partition = broker.partitions.get((topic, index))
        name = f"{topic}-{index}"
        if partition is None:
            reasons.append(f"{name}: replica not open here")
        elif partition.offline is not None:
            reasons.append(f"{name}: log offline ({partition.offline})")
        elif state.leader == node and not partition.is_leader:
            reasons.append(f"{name}: elected leader here but not leading yet")
        elif state.leader != node and node not in state.isr:
            reasons.append(f"{name}: follower not caught up (out of the ISR)")
    return reasons


def summary(reasons: list[str]) -> list[str]:
    """The reasons without names or details: per kind, how many partitions have it."""
    kinds: dict[str, int] = {}
    out: list[str] = []
    for reason in reasons:
        _, sep, why = reason.partition(": ")
        if not sep:
            out.append(reason)
            continue
        kind = why.split(" (", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    out += [f"{n} partition{'s' if n > 1 else ''}: {kind}" for kind, n in kinds.items()]
    return out


def add_routes(app: web.Application, broker: Broker) -> None:
    """``GET /healthz`` and ``GET /readyz``."""
    public = http_auth_on(broker.config)  # then anyone may ask: no names

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node_id": broker.node_id})

    async def readyz(request: web.Request) -> web.Response:
        reasons = readiness(broker)
        if public:
            reasons = summary(reasons)
        body: dict[str, Any] = {
            "status": "ready" if not reasons else "not ready",
            "node_id": broker.node_id,
            "reasons": reasons[:MAX_REASONS],
        }
        if len(reasons) > MAX_REASONS:
            body["more_reasons"] = len(reasons) - MAX_REASONS
        return web.json_response(body, status=200 if not reasons else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)

"""The layers a request passes around its handler, for one connection: quotas,
metrics and the audit log (``../shared/STYLE.md``, 15; identity and authorization
come before, in :meth:`mq.broker.server.Server.admit`).

Everything here is O(1) per request and resolved once per connection rather than
per request: the client's quota buckets (:class:`~mq.broker.throttling.ClientQuotas`,
looked up again only when the principal, the client id or the quotas change) and
its usage counters (:class:`~mq.broker.metrics.ClientUsage`). With no quota that
applies and metrics off, a request costs one comparison and one attribute test here.

Thread safety: one event loop.
"""

from __future__ import annotations

import time
from typing import Any

from mq.broker.audit import AUDITED_APIS
from mq.broker.broker import Broker
from mq.broker.context import RequestContext
from mq.broker.metrics import ClientUsage
from mq.broker.throttling import Charges, ClientQuotas
from mq.errors import MQError
from mq.wire.messages import Request
from mq.wire.registry import api_by_key


class RequestLayers:
    """One connection's quota, metrics and audit layers (see the module docstring)."""

    __slots__ = ("_broker", "_quotas", "_usage")

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._quotas = ClientQuotas(broker.client_quotas)
        meters = broker.metrics
        self._usage = ClientUsage(meters) if meters is not None else None

    def charges(self, ctx: RequestContext, client_id: str | None, now: float) -> Charges | None:
        """The quotas a request of this client is charged to (None: none applies;
        brokers' own connections are never throttled)."""
        if ctx.broker_id is not None:
            return None
        return self._quotas.lookup(ctx.principal, client_id, now)

    def answered(
        self,
        ctx: RequestContext,
        request: Request[Any],
        error: str,
        started: float,
        body: Any,
        failure: MQError | None,
    ) -> None:
        """A request was answered (``error``: "none" or its error's name; ``started``:
        its ``perf_counter()`` at dispatch): counted and, if an admin one, audited."""
        usage = self._usage
        if usage is not None:
            seconds = time.perf_counter() - started
            client = usage.of(ctx.principal, ctx.client_id)
            usage.meters.request(request.api.name, error, seconds, client)
        if request.api.key in AUDITED_APIS and ctx.broker_id is None:
            self._broker.audit.request(ctx, request, body, failure)

    def charge_refused(
        self,
        ctx: RequestContext,
        client_id: str | None,
        api_key: int,
        request_bytes: int,
        loop_s: float,
        now: float,
    ) -> float:
        """Charge a request refused before its handler to its client's quotas; the
        seconds the client must wait (0: none)."""
        if ctx.broker_id is not None:
            return 0.0
        return self._quotas.charge_refused(
            ctx.principal, client_id, api_key, request_bytes, loop_s, now
        )

    def refused(
        self,
        ctx: RequestContext,
        api_key: int,
        client_id: str | None,
        request: Request[Any] | None,
        exc: MQError,
    ) -> None:
        """A request refused before its handler (undecodable, or at the gate): audited
        when decoded and an admin one, and counted."""
        if request is not None and request.api.key in AUDITED_APIS:
            self._broker.audit.request(ctx, request, None, exc)
        usage = self._usage
        if usage is not None:
            api = api_by_key(api_key)
            name = api.name if api is not None else "unknown"
            usage.meters.request(name, exc.name, 0.0, usage.of(ctx.principal, client_id))

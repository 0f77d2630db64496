"""The TCP front of the broker: the listener, the handlers, the connections' limits.

Each connection is a :class:`~mq.broker.connection.Connection` (framing,
dispatch, back-pressure, per-connection bounds and timeouts). The server owns
what they share (:mod:`mq.broker.admission`): the broker-wide memory budget
for buffered requests and queued responses, the connection counts (in total
and per client address: past them a new connection is closed as it is
accepted), the rate-limited log lines, and the sweep that runs every
:func:`sweep_interval_s` over the connections to enforce their timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from mq.broker import (
    gate,
    handlers_admin,
    handlers_cluster,
    handlers_data,
    handlers_groups,
    handlers_producers,
    handlers_queues,
    handlers_quotas,
    handlers_replication,
    handlers_users,
    sasl,
)
from mq.broker import listeners as listener_specs
from mq.broker.admission import ConnectionCounts, MemoryBudget, RateLimitedLog
from mq.broker.authorizer import Authorizer
from mq.broker.broker import Broker
from mq.broker.config import BrokerConfig
from mq.broker.connection import Connection, Handler
from mq.broker.context import RequestContext
from mq.broker.coordinator import GroupCoordinator
from mq.broker.dispatch import Dispatcher
from mq.broker.handlers_acls import acl_handlers
from mq.broker.offsets import OffsetStore
from mq.broker.principals import parse_rules
from mq.broker.queues import ShareManager
from mq.broker.throttling import ConnectionRate
from mq.errors import UnsupportedVersionError
from mq.replication.membership import HttpEndpoint
from mq.wire import (
    apis_cluster,
    apis_core,
    apis_data,
    apis_groups,
    apis_queues,
    apis_quotas,
    apis_replication,
    apis_security,
)
from mq.wire.messages import Request
from mq.wire.registry import Api

if TYPE_CHECKING:
    from mq.http.listener import HttpListener

log = logging.getLogger(__name__)

LOG_INTERVAL_S = 10.0
"""At most one line per this many seconds for each kind of connection event (refused,
closed, closed for breaking a bound, budget spent): a flood of greedy connections must
not become a flood of logs."""
MAX_SWEEP_INTERVAL_S = 1.0
"""The sweep over the connections runs at least this often: it brings the budget's count
of queued responses up to date (freeing budget a client's reads released) and enforces
the timeouts; once a second costs O(connections) and keeps timeouts within a second."""


def on_controller(api: Api[Any, Any], handler: Handler) -> Handler:
    """``handler`` where this broker is the controller; elsewhere the request is forwarded."""

    async def run(broker: Broker, ctx: RequestContext, body: Any) -> Any:
        return await broker.peers.call_controller(api, body, lambda: handler(broker, ctx, body))

    return run


HANDLERS: dict[int, Handler] = {
    apis_core.API_VERSIONS.key: handlers_admin.api_versions,
    apis_core.METADATA.key: handlers_admin.metadata,
    apis_core.CREATE_TOPICS.key: on_controller(
        apis_core.CREATE_TOPICS, handlers_admin.create_topics
    ),
    apis_core.DELETE_TOPICS.key: on_controller(
        apis_core.DELETE_TOPICS, handlers_admin.delete_topics
    ),
    apis_core.DESCRIBE_CONFIGS.key: handlers_admin.describe_configs,
    apis_core.ALTER_CONFIGS.key: on_controller(
        apis_core.ALTER_CONFIGS, handlers_admin.alter_configs
    ),
    apis_core.DELETE_RECORDS.key: handlers_admin.delete_records,
    apis_data.PRODUCE.key: handlers_data.produce,
    apis_data.FETCH.key: handlers_data.fetch,
    apis_data.LIST_OFFSETS.key: handlers_data.list_offsets,
    apis_data.INIT_PRODUCER_ID.key: handlers_data.init_producer_id,
    apis_data.DESCRIBE_PRODUCERS.key: handlers_producers.describe_producers,  # issue 23
    apis_replication.REPLICA_FETCH.key: handlers_replication.replica_fetch,
    apis_replication.INTERNAL_APPEND.key: handlers_replication.internal_append,
    apis_replication.BROKER_HELLO.key: gate.broker_hello,
    apis_cluster.ELECT_LEADERS.key: on_controller(
        apis_cluster.ELECT_LEADERS, handlers_cluster.elect_leaders
    ),
    apis_cluster.ALTER_PARTITION_REASSIGNMENTS.key: on_controller(
        apis_cluster.ALTER_PARTITION_REASSIGNMENTS, handlers_cluster.alter_partition_reassignments
    ),
    apis_cluster.LIST_PARTITION_REASSIGNMENTS.key: on_controller(
        apis_cluster.LIST_PARTITION_REASSIGNMENTS, handlers_cluster.list_partition_reassignments
    ),
    apis_groups.FIND_COORDINATOR.key: handlers_groups.find_coordinator,
    apis_groups.JOIN_GROUP.key: handlers_groups.join_group,
    apis_groups.HEARTBEAT.key: handlers_groups.heartbeat,
    apis_groups.LEAVE_GROUP.key: handlers_groups.leave_group,
    apis_groups.OFFSET_COMMIT.key: handlers_groups.offset_commit,
    apis_groups.OFFSET_FETCH.key: handlers_groups.offset_fetch,
    apis_groups.DESCRIBE_GROUPS.key: handlers_groups.describe_groups,
    apis_groups.LIST_GROUPS.key: handlers_groups.list_groups,
    apis_queues.QUEUE_RECEIVE.key: handlers_queues.queue_receive,
    apis_queues.QUEUE_ACK.key: handlers_queues.queue_ack,
    apis_queues.DESCRIBE_QUEUE.key: handlers_queues.describe_queue,
    apis_quotas.DESCRIBE_CLIENT_QUOTAS.key: handlers_quotas.describe_client_quotas,
    apis_quotas.ALTER_CLIENT_QUOTAS.key: handlers_quotas.alter_client_quotas,
    apis_core.AUTHENTICATE.key: sasl.authenticate,
    apis_security.DESCRIBE_USER_SCRAM_CREDENTIALS.key: handlers_users.describe,
    apis_security.ALTER_USER_SCRAM_CREDENTIALS.key: handlers_users.alter,
}


def sweep_interval_s(config: BrokerConfig) -> float:
    """How often the connections are swept: a quarter of the shortest timeout, at most
    :data:`MAX_SWEEP_INTERVAL_S` (a timeout is then enforced within 25% of its value)."""
    shortest = min(
        config.connections_max_idle_ms,
        config.unfinished_frame_timeout_ms,
        config.response_stall_timeout_ms,
    )
    return min(MAX_SWEEP_INTERVAL_S, shortest / 4000)


class Server:
    """Listens on the broker's address and serves connections until stopped.

    Runs on the event loop's thread; ``connections``, ``budget`` and ``counts`` are
    shared by its connections (same thread).
    """

    def __init__(self, broker: Broker) -> None:
        config = broker.config
        self.broker = broker
        self.authorizer = Authorizer(config)
        self.handlers: dict[int, Handler] = {**HANDLERS, **acl_handlers(self.authorizer)}
        broker.served_apis = frozenset(self.handlers)
        self.connections: set[Connection] = set()
        self.budget = MemoryBudget(config.queued_max_bytes)
        self.counts = ConnectionCounts(config.max_connections, config.max_connections_per_ip)
        self.connection_rate = ConnectionRate(config.max_connection_creation_rate)  # issue 20
        self.dispatcher = Dispatcher(config)  # fair dispatch between tenants (issue 20)
        broker.tenants_contended = self.dispatcher.contended
        self.log_refused = RateLimitedLog(log, logging.WARNING, LOG_INTERVAL_S)
        self.log_close = RateLimitedLog(log, logging.INFO, LOG_INTERVAL_S)
        self.log_evicted = RateLimitedLog(log, logging.WARNING, LOG_INTERVAL_S)
        self.log_budget = RateLimitedLog(log, logging.WARNING, LOG_INTERVAL_S)
        self.http: HttpListener | None = None
        """The HTTP listener (metrics, health, console) when ``http_port`` is set."""
        if broker.metrics is not None:
            broker.metrics.connections = self._open_connections
        self._servers: list[asyncio.Server] = []
        self.principal_rules = parse_rules(config.ssl_principal_mapping_rules)
        self.bound: dict[str, tuple[str, int]] = {}
        """Each listener's name → the address it is bound to (port 0 → the real port)."""
        self._sweeper: asyncio.Task[None] | None = None

    def admit(self, request: Request[Any], ctx: RequestContext) -> Handler:
        """The one gate every decoded request passes before its handler runs (checks on
        who may call what belong here); raises the MQError its client gets instead."""
        handler = self.handlers.get(request.api.key)
        if handler is None:
            raise UnsupportedVersionError(f"{request.api.name} is not served by this broker yet")
        if ctx.listener.startswith("SASL_"):
            sasl.admit(ctx, request)  # identity: only api_versions and authenticate before
        gate.admit(ctx, request)  # authorization: before any handler runs
        return self.authorizer.admit(ctx, request, handler)  # the ACLs (issue 19)

    async def start(self) -> tuple[str, int]:
        """Start the broker and listen; returns the address actually bound (port 0 → free port).

        The broker joins the cluster (registers, campaigns for controller) only
        once it listens: its registration carries the address clients get.
        """
        config = self.broker.config
        coordinator = GroupCoordinator(
            self.broker, OffsetStore(self.broker, config.offsets_partitions)
        )
        self.broker.coordinator = coordinator
        queues = ShareManager(self.broker)
        self.broker.queues = queues
        await self.broker.start()
        await self.broker.client_quotas.start()
        await self.broker.scram_credentials.start()
        await self.authorizer.start(self.broker.store)
        loop = asyncio.get_running_loop()
        specs = listener_specs.listeners_of(config)
        tls = listener_specs.server_context(config) if any(s.tls for s in specs) else None
        for spec in specs:
            server = await loop.create_server(
                lambda spec=spec: Connection(self, spec),
                spec.host,
                spec.port,
                reuse_address=True,
                backlog=1024,
                ssl=tls if spec.tls else None,
                ssl_handshake_timeout=listener_specs.TLS_HANDSHAKE_TIMEOUT_S if spec.tls else None,
            )
            self._servers.append(server)
            self.bound[spec.name] = (spec.host, server.sockets[0].getsockname()[1])
            log.info("listener %s on %s:%d", spec.name, *self.bound[spec.name])
        self._sweeper = loop.create_task(self._sweep(sweep_interval_s(config)))
        primary = listener_specs.inter_broker(config, specs)
        host, port = self.bound[primary.name]
        self.broker.endpoints = [(name, h, p) for name, (h, p) in self.bound.items()]
        if config.http_port is not None:  # before joining: its address is registered too
            from mq.http.listener import HttpListener  # aiohttp, prometheus: only if asked

            self.http = HttpListener(self.broker, host, config.http_port, self.authorizer)
            bound = await self.http.start()
            scheme = "https" if self.http.tls else "http"
            self.broker.http_endpoint = HttpEndpoint(*bound, scheme)
        await self.broker.join((host, port))
        await coordinator.start()
        await queues.start()
        log.info("mq broker %d listening on %s:%d", config.node_id, host, port)
        return host, port

    async def stop(self) -> None:
        """Stop accepting, close connections, then close every partition cleanly."""
        if self.http is not None:
            await self.http.stop()
        for server in self._servers:
            server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for connection in list(self.connections):
            connection.close()
        for server in self._servers:
            await server.wait_closed()
        await self.broker.scram_credentials.stop()
        await self.authorizer.stop()
        if self.broker.queues is not None:
            await self.broker.queues.stop()
        if self.broker.coordinator is not None:
            await self.broker.coordinator.stop()
        await self.broker.client_quotas.stop()
        await self.broker.stop()

    def _open_connections(self) -> dict[str, int]:
        """Open connections per listener (``mq_connections``)."""
        counts: dict[str, int] = {}
        for connection in self.connections:
            name = connection.ctx.listener
            counts[name] = counts.get(name, 0) + 1
        if self.http is not None:
            counts["http"] = self.http.open_connections()
        return counts

    async def _sweep(self, interval_s: float) -> None:
        """Forever: every connection's :meth:`~mq.broker.connection.Connection.sweep`."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_s)
            now = loop.time()
            for connection in list(self.connections):
                try:
                    connection.sweep(now)
                except Exception:  # one connection's bug must not end the sweep for all
                    log.exception("sweeping connection %s failed", connection.ctx.peer)

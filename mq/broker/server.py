"""The TCP front of the broker: connections, framing, dispatch, back-pressure.

Each connection is an :class:`asyncio.Protocol` (uvloop runs it in C): bytes
go into a :class:`~mq.wire.frames.FrameDecoder`; each complete request becomes
a task *in arrival order* — a handler does everything order-sensitive (a
produce queues its batches on the partition writers) before it first awaits,
so pipelined requests act in order — and responses are written as each task
finishes, possibly out of order; clients match them by correlation id.

Bounds: at most ``max_inflight_requests`` requests per connection are in
progress; past that, and whenever the socket's send buffer is full, the
connection stops reading (TCP pushes back on the client) instead of queueing
without limit. Malformed input gets an error response when its correlation id
can be trusted, otherwise the connection is closed; the broker keeps serving.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from mq.broker import (
    gate,
    handlers_admin,
    handlers_cluster,
    handlers_data,
    handlers_groups,
    handlers_queues,
    handlers_replication,
)
from mq.broker.broker import Broker
from mq.broker.context import RequestContext
from mq.broker.coordinator import GroupCoordinator
from mq.broker.offsets import OffsetStore
from mq.broker.queues import ShareManager
from mq.errors import MQError, ProtocolError, UnsupportedVersionError
from mq.wire import (
    apis_cluster,
    apis_core,
    apis_data,
    apis_groups,
    apis_queues,
    apis_replication,
)
from mq.wire.frames import Buffer, FrameDecoder
from mq.wire.messages import (
    Request,
    decode_request,
    encode_error_response,
    encode_response_parts,
    unpack_request,
)
from mq.wire.registry import Api

log = logging.getLogger(__name__)

Handler = Callable[[Broker, RequestContext, Any], Awaitable[Any]]


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
}

_connection_ids = itertools.count(1)


class Connection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._broker = server.broker
        self._max_frame = server.broker.config.max_frame_bytes
        self._max_inflight = server.broker.config.max_inflight_requests
        self._decoder: FrameDecoder[bytes] = FrameDecoder(self._max_frame)
        self._transport: asyncio.Transport | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._reading_paused_for: set[str] = set()
        self.ctx = RequestContext(next(_connection_ids), "?")

    # -- asyncio.Protocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.ctx.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.ctx.closing = True
        self._server.connections.discard(self)
        for task in self._tasks:
            task.cancel()

    def data_received(self, data: bytes) -> None:
        try:
            self._decoder.feed(data)
            for payload in self._decoder.frames():
                self._dispatch(payload)
        except ProtocolError as exc:
            self._close(f"protocol error: {exc}")

    def pause_writing(self) -> None:
        self._pause_reading("writing")

    def resume_writing(self) -> None:
        self._resume_reading("writing")

    # -- dispatch ---------------------------------------------------------------------

    def _dispatch(self, payload: bytes) -> None:
        envelope = unpack_request(payload)  # ProtocolError: no trustworthy correlation id
        try:
            request = decode_request(envelope)
            handler = HANDLERS.get(request.api.key)
            if handler is None:
                raise UnsupportedVersionError(
                    f"{request.api.name} is not served by this broker yet"
                )
            gate.admit(self.ctx, request)  # authorization: before any handler runs
        except MQError as exc:
            self._write(encode_error_response(envelope.correlation_id, exc))
            return
        self.ctx.client_id = request.client_id
        task = asyncio.get_running_loop().create_task(self._serve(handler, request))
        self._tasks.add(task)
        task.add_done_callback(self._request_done)
        if len(self._tasks) >= self._max_inflight:
            self._pause_reading("inflight")

    async def _serve(self, handler: Handler, request: Request[Any]) -> None:
        cid = request.correlation_id
        try:
            body = await handler(self._broker, self.ctx, request.body)
            frame: bytes | list[Buffer] = encode_response_parts(cid, 0, body, self._max_frame)
        except MQError as exc:
            frame = encode_error_response(cid, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s from %s failed", request.api.name, self.ctx.peer)
            frame = encode_error_response(cid, MQError(f"{request.api.name} failed on the broker"))
        if request.api is apis_data.PRODUCE:
            if request.body["acks"] == 0:
                return  # acks=0: the producer expects no response
            # After the long polls this append woke (their tasks run first in the loop's
            # next turn): a consumer's fetch response does not queue behind the ack.
            asyncio.get_running_loop().call_soon(self._write, frame)
            return
        self._write(frame)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if len(self._tasks) < self._max_inflight:
            self._resume_reading("inflight")

    # -- transport ----------------------------------------------------------------------

    def _write(self, frame: bytes | list[Buffer]) -> None:
        """One frame: bytes, or the buffers of one (a fetch's record sets uncopied)."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            if isinstance(frame, bytes):
                transport.write(frame)
            elif len(frame) == 1:
                transport.write(frame[0])
            else:
                transport.writelines(frame)

    def _pause_reading(self, reason: str) -> None:
        if not self._reading_paused_for and self._transport is not None:
            self._transport.pause_reading()
        self._reading_paused_for.add(reason)

    def _resume_reading(self, reason: str) -> None:
        if reason not in self._reading_paused_for:
            return
        self._reading_paused_for.discard(reason)
        if not self._reading_paused_for and self._transport and not self._transport.is_closing():
            self._transport.resume_reading()

    def _close(self, why: str) -> None:
        log.info("closing connection %s: %s", self.ctx.peer, why)
        if self._transport is not None:
            self._transport.close()

    def close(self) -> None:
        self._close("broker shutting down")


class Server:
    """Listens on the broker's address and serves connections until stopped."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        broker.served_apis = frozenset(HANDLERS)
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None

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
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self), config.host, config.port, reuse_address=True, backlog=1024
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        await self.broker.join((config.host, port))
        await coordinator.start()
        await queues.start()
        log.info("mq broker %d listening on %s:%d", config.node_id, host, port)
        return config.host, port

    async def stop(self) -> None:
        """Stop accepting, close connections, then close every partition cleanly."""
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()
        if self.broker.queues is not None:
            await self.broker.queues.stop()
        if self.broker.coordinator is not None:
            await self.broker.coordinator.stop()
        await self.broker.stop()

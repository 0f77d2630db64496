"""One client connection: framing, dispatch, back-pressure, bounds, timeouts.

Each connection is an :class:`asyncio.Protocol` (uvloop runs it in C): bytes
go into a :class:`~mq.wire.frames.FrameDecoder`; each complete request becomes
a task *in arrival order* — a handler does everything order-sensitive (a
produce queues its batches on the partition writers) before it first awaits,
so pipelined requests act in order — and responses are written as each task
finishes, possibly out of order; clients match them by correlation id.

Two separate brakes (both bounded, both undone as soon as the cause goes):

- *Dispatch is held* while ``max_inflight_requests`` requests are in progress
  or the responses queued in the socket are above ``max_queued_response_bytes``
  (the transport's high water mark: its client does not read). A connection
  with a request to start queues on the server's
  :class:`~mq.broker.dispatch.Dispatcher`, which starts one request per
  queued connection per turn of the loop, round robin over tenants (fairness
  between connections and between tenants, issue 20). Complete
  frames then wait in the decoder; reading goes on until they reach
  ``max_pending_request_bytes``, so a client that closes while its long polls
  are parked is noticed at once and its polls are cancelled (they leave the
  partitions' waiter lists); past that bound, the sweep notices the close
  with a poll(2) of the socket for the peer's end (no read needed).
- *The throttle brake* (issue 20, :mod:`mq.broker.throttling`): a client over its
  quota gets its response with ``throttle_time_ms`` and then neither its frames
  are dispatched nor its socket read for that long (Kafka's muted channel).
  Failed requests count and are answered so too, those refused before their
  handler included (undecodable, or refused at the gate: a flood of
  unauthorized requests is not free).
- *Reading is paused* when those waiting frames reach their bound, when the
  broker-wide memory budget (:class:`~mq.broker.admission.MemoryBudget`)
  cannot cover the frame in progress (its declared length is reserved as soon
  as its length prefix is in, before its bytes are buffered), and while the
  connection closes.

Every byte a connection holds for its client is on the budget: request bytes
buffered or reserved, and responses queued in the socket's send buffer
(sampled after each write and by the server's sweep). The sweep
(:meth:`Connection.sweep`) closes connections idle for
``connections_max_idle_ms``, whose client has not read its responses for
``response_stall_timeout_ms``, or whose frame stays unfinished for
``unfinished_frame_timeout_ms``.

Malformed input gets an error response when its correlation id can be
trusted. Otherwise the connection closes, but only after the requests that
came before the bad bytes have been answered (up to ``close_linger_ms``).

Not thread-safe: every method runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import select
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from mq.broker import pacing
from mq.broker.broker import Broker
from mq.broker.context import RequestContext
from mq.broker.listeners import Listener, plaintext_check, tls_identity
from mq.broker.request_layers import RequestLayers
from mq.broker.throttling import Timed, throttle_ms
from mq.errors import MQError, ProtocolError
from mq.wire import apis_data
from mq.wire.apis_quotas import THROTTLE_TIME_KEY
from mq.wire.frames import NEED_DATA, Buffer, FrameDecoder
from mq.wire.messages import (
    Request,
    decode_request,
    encode_big_response_parts,
    encode_error_response,
    encode_response_parts,
    unpack_request,
)

if TYPE_CHECKING:
    from mq.broker.server import Server

log = logging.getLogger(__name__)

Handler = Callable[[Broker, RequestContext, Any], Awaitable[Any]]

RESUME_WRITING_FRACTION = 4
"""Dispatch resumes when the queued responses fall below 1/4 of their high water mark:
far enough below it that a connection does not flap between held and served."""

DISPATCH_PER_TURN = 1
"""Requests a connection may start per turn of the event loop (the server's
:class:`~mq.broker.dispatch.Dispatcher` enforces it); the rest of what it sent
starts in later turns (it keeps its order). Tasks run in the order they were made, so a
client that pipelines many expensive requests (64 metadata requests of 6 ms each) would
otherwise put all of them ahead of every other client's next request; with one per
turn, another client's request waits behind at most one of each busy connection's
(measured: 10 such clients delay a fresh api_versions by 0.2 s instead of 4.4 s). A
turn of uvloop costs microseconds, so a pipelining producer loses nothing measurable."""

_PEER_GONE = select.POLLRDHUP | select.POLLHUP | select.POLLERR
"""poll(2) events saying the client closed (or half-closed) its side or the socket failed."""

_connection_ids = itertools.count(1)


def peer_closed(transport: asyncio.BaseTransport) -> bool:
    """Whether the client has closed its side, seen without reading the socket (a
    connection the broker does not read never gets its end of stream delivered)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), _PEER_GONE)
    return any(events & _PEER_GONE for _, events in poller.poll(0))


class Connection(asyncio.Protocol):
    """One client connection (see the module's docstring)."""

    def __init__(self, server: Server, listener: Listener | None = None) -> None:
        config = server.broker.config
        self._server = server
        self._broker = server.broker
        self._budget = server.budget
        self._loop = asyncio.get_running_loop()
        self._max_frame = config.max_frame_bytes
        self._max_inflight = config.max_inflight_requests
        self._max_pending = config.max_pending_request_bytes
        self._decoder: FrameDecoder[bytes] = FrameDecoder(self._max_frame)
        self._transport: asyncio.Transport | None = None
        self._address: str | None = None
        """The client's address once admitted (counted in the server's connection counts)."""
        self._tasks: dict[asyncio.Task[None], tuple[str, str]] = {}
        """Requests in progress, each with the dispatch flow it counts against."""
        self._dispatcher = server.dispatcher
        self._held_for: set[str] = set()
        """Why complete frames are not dispatched now ("inflight", "writing", "turn",
        "decoding": a big frame in the codec thread, "ordered": a big produce queueing
        its appends; see :mod:`mq.broker.pacing`)."""
        self._ordered: asyncio.Task[None] | None = None
        """The produce whose appends are still being queued (dispatch held for it)."""
        self._reading_paused_for: set[str] = set()
        """Why the socket is not read now ("pending", "budget", "closing")."""
        self._in_reserved = 0
        """Budget bytes held for request bytes (buffered, or declared by a length prefix)."""
        self._out_reserved = 0
        """Budget bytes held for responses queued in the transport."""
        self._waiting_budget = False
        self._last_activity = self._loop.time()
        self._partial_since: float | None = None
        """When the frame in progress began (None: no partial frame)."""
        self._partial_mark = 0
        self._stalled_since: float | None = None
        """When the queued responses went above the high water mark (None: below it)."""
        self._closing = False
        self._lost = False
        self._linger: asyncio.TimerHandle | None = None
        self._brake: asyncio.TimerHandle | None = None
        self._brake_until = 0.0
        """Until when the throttle brake holds this connection (quotas, issue 20)."""
        self._dispatched_at = 0.0
        """perf_counter() when the frame being dispatched was taken: a refused request's
        loop time is counted from there (its decoding and refusal)."""
        self._layers = RequestLayers(server.broker)
        """Quotas, metrics and audit of its requests (:mod:`mq.broker.request_layers`)."""
        self.ctx = RequestContext(next(_connection_ids), "?")
        self._listener = listener
        self._opened = self._loop.time()
        if listener is not None:
            self.ctx.listener = listener.name
            self.ctx.authenticates = listener.sasl or (
                listener.tls and config.tls_client_ca is not None
            )

    # -- asyncio.Protocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.ctx.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        address = str(peer[0]) if peer else "?"
        refusal = self._server.counts.admit(address)
        if refusal is not None:
            self._lost = True
            self._server.log_refused("refused a connection from %s: %s", self.ctx.peer, refusal)
            self._transport.abort()
            return
        self._address = address
        delay = self._server.connection_rate.admit(address, self._loop.time())
        if delay > self._broker.config.quota_max_throttle_ms / 1000:
            self._server.counts.release(address)
            self._address = None
            self._lost = True
            self._server.log_refused(
                "refused a connection from %s: above max_connection_creation_rate", self.ctx.peer
            )
            self._transport.abort()
            return
        if delay:
            self._hold_back(delay)
        if self._listener is not None and self._listener.tls:
            refusal = tls_identity(self.ctx, transport, self._server.principal_rules)
            if refusal is not None:
                self._server.log_refused("refused %s: %s", self.ctx.peer, refusal)
                self._transport.abort()
                return
        high = self._broker.config.max_queued_response_bytes
        self._transport.set_write_buffer_limits(high, high // RESUME_WRITING_FRACTION)
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.ctx.closing = True
        if self._address is None:
            return  # refused at accept: never counted
        self._lost = True
        self._server.counts.release(self._address)
        self._address = None
        self._server.connections.discard(self)
        self._dispatcher.forget(self)
        if self._linger is not None:
            self._linger.cancel()
        if self._brake is not None:
            self._brake.cancel()
        for task in self._tasks:
            task.cancel()
        self._budget.cancel(self)
        self._budget.release(self._in_reserved)
        self._budget.force(-self._out_reserved)
        self._in_reserved = self._out_reserved = 0
        self._decoder = FrameDecoder(self._max_frame)

    def data_received(self, data: bytes) -> None:
        self._last_activity = self._loop.time()
        if self._closing:
            return  # after a malformed frame nothing more is read
        try:
            if self._decoder.frames_completed == 0 and not self._decoder.buffered_bytes:
                plaintext_check(self._listener, data)
            self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(exc)
            return
        self._pump()

    def pause_writing(self) -> None:
        self._stalled_since = self._loop.time()
        self._held_for.add("writing")

    def resume_writing(self) -> None:
        self._stalled_since = None
        self._account_output()
        self._release_hold("writing")

    # -- dispatch ---------------------------------------------------------------------

    def _pump(self) -> None:
        """Queue for dispatch if a complete frame waits and nothing holds dispatch (a
        framing error with no frame before it fails the connection now); re-admit."""
        decoder = self._decoder
        try:
            if not decoder.complete_bytes:
                decoder.next_frame()  # NEED_DATA, or the framing error
        except ProtocolError as exc:
            self._fail(exc)
            return
        if decoder.complete_bytes and not self._held_for:
            ctx = self.ctx
            self._dispatcher.want(self, (ctx.principal, ctx.client_id or ""))
        self._track_partial()
        self._account_input()

    def dispatch_next(self) -> int:
        """The dispatcher's call: start the next request; its size (0: none started)."""
        if self._held_for or self._closing or self._lost:
            return 0
        try:
            payload = self._decoder.next_frame()  # raises a framing error behind the frames
            if payload is NEED_DATA:
                return 0
            self._dispatch(payload)  # ProtocolError: no trustworthy correlation id
        except ProtocolError as exc:
            self._fail(exc)
            return 0
        return len(payload)

    def after_turn(self) -> None:
        """The dispatcher's turn is over: queue again for the next one, re-admit."""
        if not self._closing and not self._lost:
            self._pump()

    def _dispatch(self, payload: bytes) -> None:
        self._dispatched_at = time.perf_counter()
        if len(payload) >= pacing.OFFLOAD_BYTES:  # decoded in the codec thread, in order:
            self._held_for.add("decoding")  # this connection starts nothing meanwhile
            decoded = self._loop.run_in_executor(pacing.CODEC, pacing.decode_payload, payload)
            decoded.add_done_callback(lambda done: self._decoded(done, len(payload)))
            return
        envelope = unpack_request(payload)  # ProtocolError: no trustworthy correlation id
        try:
            request = decode_request(envelope)
        except MQError as exc:
            key, client_id = envelope.api_key, envelope.client_id
            self._answer_refused(envelope.correlation_id, key, client_id, len(payload), exc)
            self._refused(key, client_id, None, exc)
            return
        self._start(request, len(payload), big=False)

    def _answer_refused(
        self, cid: int, api_key: int, client_id: str | None, size: int, exc: MQError
    ) -> None:
        """The error response of a request refused before its handler. The refusal used
        the loop too (decoding, the gate): charged to its client's quotas like any other
        request, and answered with the throttle time when that puts it over (KIP-124)."""
        loop_s, now = time.perf_counter() - self._dispatched_at, self._loop.time()
        wait = self._layers.charge_refused(self.ctx, client_id, api_key, size, loop_s, now)
        if wait > 0:
            self._hold_back(wait)
        self._write(encode_error_response(cid, exc, throttle_ms(wait)))

    def _refused(
        self, api_key: int, client_id: str | None, request: Request[Any] | None, exc: MQError
    ) -> None:
        """A request refused before its handler (undecodable, or at the gate): audited,
        counted, and the connection closed if the refusal says so (SASL)."""
        self._layers.refused(self.ctx, api_key, client_id, request, exc)
        if self.ctx.disconnect is not None:
            self._close(self.ctx.disconnect)

    def _decoded(self, decoded: asyncio.Future[tuple[Request[Any], float]], size: int) -> None:
        if self._lost or self._closing or decoded.cancelled():
            return  # closed meanwhile (a later frame was malformed): not executed
        failure = decoded.exception()
        if isinstance(failure, ProtocolError):
            self._fail(failure)
            return
        # a refusal is charged the codec thread's decoding too, as if done on the loop
        if isinstance(failure, pacing.Undecodable):
            self._dispatched_at = time.perf_counter() - failure.spent
            cid, client_id = failure.correlation_id, failure.client_id
            self._answer_refused(cid, failure.api_key, client_id, size, failure.error)
        elif failure is not None:  # a bug: this connection cannot go on in order
            log.error("decoding a request from %s failed: %r", self.ctx.peer, failure)
            self._close("a request could not be decoded", abort=True)
            return
        else:
            request, spent = decoded.result()
            self._dispatched_at = time.perf_counter() - spent
            self._start(request, size, big=True, decoded_s=spent)
        self._release_hold("decoding")

    def _start(
        self, request: Request[Any], size: int, *, big: bool, decoded_s: float = 0.0
    ) -> None:
        """Admit and start a request; ``decoded_s``: the codec thread's time decoding it
        (charged to the client's request quota with the loop's time)."""
        try:
            handler = self._server.admit(request, self.ctx)
        except MQError as exc:
            cid, key = request.correlation_id, request.api.key
            self._answer_refused(cid, key, request.client_id, size, exc)
            self._refused(key, request.client_id, request, exc)
            return
        self.ctx.client_id = request.client_id
        if pacing.ordered_entries(request.api, request.body) > pacing.ENTRIES_PER_TURN:
            # its handler gives the loop turns while it queues its work (appends, commits,
            # settlements): nothing of this connection starts before that is done
            self._held_for.add("ordered")
            token = pacing.ordered_task_context(self._appends_queued)
            try:
                task = self._loop.create_task(self._serve(handler, request, size, big, decoded_s))
            finally:
                pacing.reset_context(token)
            self._ordered = task
        else:
            task = self._loop.create_task(self._serve(handler, request, size, big, decoded_s))
        flow = (self.ctx.principal, request.client_id or "")
        self._tasks[task] = flow
        self._dispatcher.started(flow)
        task.add_done_callback(self._request_done)
        if len(self._tasks) >= self._max_inflight:
            self._held_for.add("inflight")

    async def _serve(
        self, handler: Handler, request: Request[Any], size: int, big: bool, decoded_s: float
    ) -> None:
        cid = request.correlation_id
        ctx = self.ctx
        charges = self._layers.charges(ctx, request.client_id, self._loop.time())
        started = time.perf_counter()
        error = "none"
        body: Any = None
        failure: MQError | None = None
        timed: Timed | None = None
        encoding = 0.0
        frame: bytes | list[Buffer]
        try:
            work: Awaitable[Any] = handler(self._broker, ctx, request.body)
            if charges is not None and charges.loop_time is not None:
                work = timed = Timed(work)
            body = await work
            encoding = time.perf_counter()
            frame = await self._encode(cid, body, big)
        except MQError as exc:
            encoding = time.perf_counter()
            frame = encode_error_response(cid, exc)
            error, failure = exc.name, exc
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s from %s failed", request.api.name, ctx.peer)
            encoding = time.perf_counter()
            failure = MQError(f"{request.api.name} failed on the broker")
            frame = encode_error_response(cid, failure)
            error = failure.name
        if charges is not None:  # charged whether it succeeded or failed (KIP-124)
            # the handler's loop time, the encoding (on the loop or awaited from the codec
            # thread) and the codec thread's decoding: the broker's time either way
            loop_s = (
                timed.spent + time.perf_counter() - encoding + decoded_s
                if timed is not None
                else 0.0
            )
            wait = charges.charge(request.api.key, size, frame, loop_s, self._loop.time())
            if wait > 0:
                self._hold_back(wait)
                if failure is not None:
                    frame = encode_error_response(cid, failure, throttle_ms(wait))
                else:  # (one more key: too big only at the frame bound, then untold)
                    throttled = {**body, THROTTLE_TIME_KEY: throttle_ms(wait)}
                    with contextlib.suppress(MQError):
                        frame = await self._encode(cid, throttled, big)
        self._layers.answered(ctx, request, error, started, body, failure)  # metrics, audit
        if request.api is apis_data.PRODUCE:
            if request.body["acks"] == 0:
                return  # acks=0: the producer expects no response
            # After the long polls this append woke (their tasks run first in the loop's
            # next turn): a consumer's fetch response does not queue behind the ack.
            # The write is queued before this task's done callback (_request_done).
            self._loop.call_soon(self._write, frame)
            return
        self._write(frame)
        if self.ctx.disconnect is not None and not self._closing:
            self._close(self.ctx.disconnect)

    async def _encode(self, cid: int, body: Any, big: bool) -> bytes | list[Buffer]:
        """A response's frame: large ones (answers to big requests, long lists) encoded
        in the codec thread, in pieces (:mod:`mq.broker.pacing`), the rest right here."""
        if big or pacing.large_body(body):
            return await self._loop.run_in_executor(
                pacing.CODEC, encode_big_response_parts, cid, 0, body, self._max_frame
            )
        return encode_response_parts(cid, 0, body, self._max_frame)

    def _appends_queued(self) -> None:
        self._ordered = None
        self._release_hold("ordered")

    def _request_done(self, task: asyncio.Task[None]) -> None:
        flow = self._tasks.pop(task, None)
        if flow is not None:
            self._dispatcher.finished(flow)
        if task is self._ordered:  # failed or cancelled before its appends were queued
            self._appends_queued()
        if self._lost:
            return
        if self._closing:
            if not self._tasks:
                self._loop.call_soon(self._finish_close)  # after a produce's queued write
            return
        if len(self._tasks) < self._max_inflight:
            self._release_hold("inflight")

    def _hold_back(self, seconds: float) -> None:
        """The throttle brake: neither dispatch nor read for ``seconds`` from now."""
        until = self._loop.time() + seconds
        if until <= self._brake_until or self._lost:
            return
        self._brake_until = until
        if self._brake is not None:
            self._brake.cancel()
        self._held_for.add("throttle")
        self._set_reading("throttle", False)
        self._brake = self._loop.call_at(until, self._release_brake)

    def _release_brake(self) -> None:
        self._brake = None
        self._set_reading("throttle", True)
        self._release_hold("throttle")

    def _release_hold(self, reason: str) -> None:
        if reason not in self._held_for:
            return
        self._held_for.discard(reason)
        if not self._held_for and not self._closing and not self._lost:
            self._pump()

    # -- the budget ---------------------------------------------------------------------

    def _account_input(self) -> None:
        """Hold budget for the request bytes buffered and the rest of the frame in
        progress; pause reading when that cannot be had or complete frames pile up."""
        decoder = self._decoder
        want = decoder.reserve_bytes
        if want <= self._in_reserved:
            if want < self._in_reserved:
                self._budget.release(self._in_reserved - want)
                self._in_reserved = want
        else:
            buffered = decoder.buffered_bytes
            if buffered > self._in_reserved:  # already in memory (the last read): counted
                self._budget.force(buffered - self._in_reserved)
                self._in_reserved = buffered
            rest = want - self._in_reserved
            if rest > 0 and not self._waiting_budget:
                if self._budget.try_take(rest):
                    self._in_reserved = want
                else:
                    self._waiting_budget = True
                    self._budget.wait(self, rest)  # may be granted at once
                if self._waiting_budget:
                    self._server.log_budget(
                        "the connections' memory budget (queued_max_bytes=%d) is spent: "
                        "%d bytes held, %d connections wait to be read",
                        self._budget.limit,
                        self._budget.used,
                        self._budget.waiting,
                    )
        self._set_reading("budget", not self._waiting_budget)
        # frames wait while dispatch is held or until the dispatcher's next turn
        self._set_reading("pending", decoder.complete_bytes < self._max_pending)

    def budget_granted(self, size: int) -> None:
        """The budget gave this connection the ``size`` bytes it waited for."""
        self._waiting_budget = False
        self._in_reserved += size
        if self._lost:
            self._budget.release(self._in_reserved)
            self._in_reserved = 0
            return
        self._account_input()

    def _account_output(self) -> None:
        """Bring the budget's count of this connection's queued responses up to date."""
        transport = self._transport
        if transport is None or self._lost:
            return
        queued = transport.get_write_buffer_size()
        if queued != self._out_reserved:
            self._budget.force(queued - self._out_reserved)
            self._out_reserved = queued

    # -- timeouts -------------------------------------------------------------------------

    def _track_partial(self) -> None:
        decoder = self._decoder
        if decoder.reserve_bytes <= decoder.complete_bytes:
            self._partial_since = None
        elif self._partial_since is None or self._partial_mark != decoder.frames_completed:
            self._partial_since = self._loop.time()
            self._partial_mark = decoder.frames_completed

    def sweep(self, now: float) -> None:
        """The server's periodic check: budget, stalled readers, idleness, unfinished frames."""
        if self._lost or self._closing:
            return
        self._account_output()
        config = self._broker.config
        stalled = self._stalled_since
        transport = self._transport
        if self._reading_paused_for and self._tasks and transport and peer_closed(transport):
            # its parked requests are cancelled at once (connection_lost)
            self._close("its client closed the connection while it was not read")
            return
        if (
            self.ctx.authenticates
            and not self.ctx.authenticated
            and now - self._opened > config.sasl_authenticate_timeout_ms / 1000
        ):
            self._close(
                f"not authenticated within {config.sasl_authenticate_timeout_ms} ms "
                "(sasl_authenticate_timeout_ms)",
                evicted=True,
            )
        elif stalled is not None and now - stalled > config.response_stall_timeout_ms / 1000:
            self._close(
                f"its client has not read its responses for "
                f"{config.response_stall_timeout_ms} ms (response_stall_timeout_ms): "
                f"{self._out_reserved} bytes queued",
                abort=True,
                evicted=True,
            )
        elif (
            not self._tasks
            and not self._waiting_budget  # the broker is the one not reading
            and now - self._last_activity > config.connections_max_idle_ms / 1000
        ):
            self._close(f"idle for {config.connections_max_idle_ms} ms (connections_max_idle_ms)")
        elif (
            self._partial_since is not None
            and not self._reading_paused_for
            and now - self._partial_since > config.unfinished_frame_timeout_ms / 1000
        ):
            self._close(
                f"a frame unfinished for {config.unfinished_frame_timeout_ms} ms "
                f"(unfinished_frame_timeout_ms): {self._decoder.buffered_bytes} of "
                f"{self._decoder.reserve_bytes} bytes in",
                evicted=True,
            )

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
            self._last_activity = self._loop.time()
            self._account_output()

    def _set_reading(self, reason: str, allowed: bool) -> None:
        paused = self._reading_paused_for
        if allowed:
            if reason not in paused:
                return
            paused.discard(reason)
            if not paused and self._transport and not self._transport.is_closing():
                self._transport.resume_reading()
                if self._partial_since is not None:  # its clock stops while not read
                    self._partial_since = self._loop.time()
        elif reason not in paused:
            if not paused and self._transport is not None:
                self._transport.pause_reading()
            paused.add(reason)

    def _fail(self, exc: ProtocolError) -> None:
        """A frame that cannot be trusted: answer what came before it, then close.

        Long polls among them answer at their next wake-up with what they have.
        """
        self._closing = True
        self.ctx.closing = True
        self._set_reading("closing", False)
        self._budget.cancel(self)
        self._waiting_budget = False
        self._budget.release(self._in_reserved)
        self._in_reserved = 0
        self._decoder = FrameDecoder(self._max_frame)
        self._server.log_close("closing connection %s: protocol error: %s", self.ctx.peer, exc)
        if not self._tasks:
            self._finish_close()
            return
        self._linger = self._loop.call_later(
            self._broker.config.close_linger_ms / 1000, self._finish_close
        )

    def _finish_close(self) -> None:
        transport = self._transport
        if transport is None or self._lost:
            return
        if transport.get_write_buffer_size():
            # Flush what is queued, within the linger bound (a client that does not
            # read cannot keep the connection).
            transport.close()
            self._linger = self._loop.call_later(
                self._broker.config.close_linger_ms / 1000, transport.abort
            )
        else:
            transport.close()

    def _close(self, why: str, *, abort: bool = False, evicted: bool = False) -> None:
        """Close (``abort``: dropping what is queued); ``evicted``: for breaking a bound,
        logged as a warning."""
        logged = self._server.log_evicted if evicted else self._server.log_close
        logged("closing connection %s: %s", self.ctx.peer, why)
        self._closing = True
        if self._transport is not None:
            if abort:
                self._transport.abort()
            else:
                self._finish_close()

    def close(self) -> None:
        self._close("broker shutting down")

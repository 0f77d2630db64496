"""One TCP connection to a broker: framing, correlation ids, pipelining, timeouts.

A :class:`Connection` is an :class:`asyncio.Protocol` (uvloop runs its
transport in C). Requests are written as soon as they are made, many at once
(pipelining); the broker may answer them out of order, so each request gets a
correlation id and a future in ``_pending``, and the protocol's
``data_received`` — the connection's reader — feeds a sans-IO
:class:`~mq.wire.frames.FrameDecoder` and resolves the future of every
complete response by its id.

Lifecycle: :meth:`Connection.open` connects and sends ``api_versions`` first;
:meth:`Connection.version_for` then picks each API's version. When the
connection closes for any reason — the peer, a protocol error, a request
timeout, :meth:`Connection.close` — every pending future fails with a
retriable :class:`~mq.errors.NetworkError` whose ``__cause__`` is the reason.

Bounds: at most ``max_in_flight`` requests await a response (and none is
written while the transport's buffer is above its high-water mark); a caller
of :meth:`Connection.request` waits for room instead of queueing without
limit. A request that gets no response within its timeout fails with
:class:`~mq.errors.RequestTimedOutError` and closes the connection, as Kafka's
client does: once a response is overdue nothing later on the connection can be
trusted to be in order. ``produce`` with ``acks=0`` gets no response at all;
its future completes (with None) once the request is written.

Throttling (quotas, issue 20): a response whose body carries
``throttle_time_ms`` means the broker wants nothing more on this connection
for that long (it does not read it meanwhile); the connection is then not
:attr:`ready` until the time is up, so callers of :meth:`request` wait
instead of sending requests that would sit unread (Kafka's KIP-219). A
throttle is not a failure: nothing is retried and no breaker counts it.

Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from typing import Any, Final, NamedTuple, TypeVar, cast

from mq.client.security import Security, authenticate
from mq.errors import (
    MQError,
    NetworkError,
    ProtocolError,
    RequestTimedOutError,
    TlsMismatchError,
    UnsupportedVersionError,
)
from mq.wire.apis_core import API_VERSIONS
from mq.wire.apis_quotas import THROTTLE_TIME_KEY
from mq.wire.frames import FrameDecoder
from mq.wire.limits import I32_MAX, MAX_FRAME_BYTES
from mq.wire.messages import (
    ResponseEnvelope,
    decode_response,
    encode_request_parts,
    unpack_response,
)
from mq.wire.registry import Api

log = logging.getLogger(__name__)

RespT = TypeVar("RespT")

DEFAULT_MAX_IN_FLIGHT: Final = 32
"""Requests awaiting a response per connection. Half the broker's default
``max_inflight_requests`` (64), past which the broker stops reading: the
client waits before the broker has to push back through TCP."""
DEFAULT_REQUEST_TIMEOUT_S: Final = 30.0
"""Kafka's ``request.timeout.ms``."""
DEFAULT_CONNECT_TIMEOUT_S: Final = 10.0
"""How long a TCP connect plus the api_versions exchange may take."""
CLIENT_SOFTWARE_NAME: Final = "mq-python"
MAX_THROTTLE_S: Final = 60.0
"""The longest throttle a response can impose on the client (a broker's bound is
smaller); a larger value from a confused broker does not stall the client longer."""


class _Pending(NamedTuple):
    future: asyncio.Future[Any]
    api: Api[Any, Any]
    version: int
    timer: asyncio.TimerHandle | None


class Connection(asyncio.Protocol):
    """A connection to one broker address; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.max_in_flight = max_in_flight
        self._max_frame = max_frame_bytes
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(max_frame_bytes, decode=unpack_response)
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(0)
        self._write_paused = False
        self._room: asyncio.Future[None] | None = None
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._close_reason: BaseException | None = None
        self._throttle: asyncio.TimerHandle | None = None
        self._throttled_until = 0.0
        self.throttled_ms = 0
        """Total throttle time the broker asked of this connection (milliseconds)."""
        self._tls = False
        self._heard = False
        """Whether any byte came from the broker (a close before: maybe a TLS listener)."""
        self.api_versions: dict[int, tuple[int, int]] = {}
        """API key → (min, max) version the broker supports, from api_versions."""

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._pending)} in flight"
        return f"<Connection {self.host}:{self.port} {state}>"

    # -- opening and closing ------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        security: Security | None = None,
        **kwargs: Any,
    ) -> Connection:
        """Connect (TLS if ``security`` says so), exchange api_versions, authenticate
        (SASL if ``security`` says so), and return the ready connection.

        Raises NetworkError if the broker cannot be reached or does not answer
        in ``connect_timeout_s``, TlsMismatchError if one side speaks TLS and the
        other not, SaslAuthenticationFailedError if the login is refused.
        """
        loop = asyncio.get_running_loop()
        conn = cls(host, port, **kwargs)
        tls = security.ssl_context if security is not None and security.tls else None
        conn._tls = tls is not None
        try:
            async with asyncio.timeout(connect_timeout_s):
                try:
                    await loop.create_connection(
                        lambda: conn, host, port, ssl=tls, server_hostname=host if tls else None
                    )
                except (ssl.SSLError, ConnectionResetError, ConnectionAbortedError) as exc:
                    if tls is None:  # a refused connect is not a TLS matter: retriable
                        raise
                    raise tls_failure(host, port, exc) from exc
                response = await conn.call(API_VERSIONS, conn._api_versions_body(), version=0)
                conn.api_versions = {
                    a["key"]: (a["min_version"], a["max_version"]) for a in response["apis"]
                }
                if security is not None and security.sasl:
                    await authenticate(conn, security)
        except (OSError, TimeoutError) as exc:
            await conn._discard(exc)
            raise NetworkError(f"cannot connect to {host}:{port}: {exc}") from exc
        except BaseException:
            await conn._discard(None)
            raise
        return conn

    async def _discard(self, reason: BaseException | None) -> None:
        """Drop a connection that failed to open, and wait until it is gone: a TLS
        goodbye would wait on a broker that may not answer, and a caller that closes
        its loop next (the sync wrappers) must not leave the socket behind."""
        if self._close_reason is None:
            self._close_reason = reason
        if self._transport is None:
            self._shut_down()
        else:
            self._transport.abort()
        await self.wait_closed()

    @staticmethod
    def _api_versions_body() -> dict[str, str]:
        from mq import __version__  # mq/__init__ imports the client: import lazily

        return {
            "client_software_name": CLIENT_SOFTWARE_NAME,
            "client_software_version": __version__,
        }

    @property
    def closed(self) -> bool:
        return self._closed.done()

    @property
    def in_flight(self) -> int:
        """Requests written and awaiting their response."""
        return len(self._pending)

    @property
    def ready(self) -> bool:
        """Whether a request can be written now without exceeding a bound."""
        return (
            len(self._pending) < self.max_in_flight
            and not self._write_paused
            and self._throttle is None
        )

    def close(self, reason: BaseException | None = None) -> None:
        """Close the connection; every pending request fails with NetworkError."""
        if self._close_reason is None:
            self._close_reason = reason
        if self._transport is not None:
            self._transport.close()
        else:
            self._shut_down()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    # -- requests -------------------------------------------------------------------------

    def version_for(self, api: Api[Any, Any]) -> int:
        """The highest version of ``api`` both sides speak; UnsupportedVersionError if none."""
        theirs = self.api_versions.get(api.key)
        if theirs is None:
            raise UnsupportedVersionError(f"{self.host}:{self.port} does not offer {api.name}")
        low, high = max(theirs[0], api.min_version), min(theirs[1], api.max_version)
        if low > high:
            raise UnsupportedVersionError(
                f"{api.name}: broker speaks v{theirs[0]}..v{theirs[1]}, "
                f"client v{api.min_version}..v{api.max_version}"
            )
        return high

    async def request(
        self,
        api: Api[Any, RespT],
        body: Any,
        *,
        timeout_s: float | None = None,
        expect_response: bool = True,
        version: int | None = None,
    ) -> asyncio.Future[RespT]:
        """Write a request (waiting for room first) and return the future of its response.

        The future's result is the response body; a response with a non-zero
        error code fails it with that error's class. ``expect_response=False``
        (produce with acks=0): the future is already done, with None.
        """
        while not self.ready:
            if self.closed:
                raise self._network_error()
            if self._room is None or self._room.done():
                self._room = self._loop.create_future()
            await asyncio.wait([self._room, self._closed], return_when=asyncio.FIRST_COMPLETED)
        return self.request_nowait(
            api, body, timeout_s=timeout_s, expect_response=expect_response, version=version
        )

    def request_nowait(
        self,
        api: Api[Any, RespT],
        body: Any,
        *,
        timeout_s: float | None = None,
        expect_response: bool = True,
        version: int | None = None,
    ) -> asyncio.Future[RespT]:
        """:meth:`request` for a caller that has checked :attr:`ready` (no bound is enforced)."""
        transport = self._transport
        if transport is None or self.closed or transport.is_closing():
            raise self._network_error()
        if version is None:
            version = self.version_for(api)
        cid = next(self._ids) & I32_MAX
        frame = encode_request_parts(api, version, cid, self.client_id, body, self._max_frame)
        future: asyncio.Future[RespT] = self._loop.create_future()
        if expect_response:
            timeout = self.request_timeout_s if timeout_s is None else timeout_s
            timer = self._loop.call_later(timeout, self._timed_out, cid) if timeout > 0 else None
            self._pending[cid] = _Pending(future, api, version, timer)
        else:
            future.set_result(cast(RespT, None))
        if len(frame) == 1:
            transport.write(frame[0])
        else:  # a produce's record sets, uncopied
            transport.writelines(frame)
        return future

    async def call(
        self,
        api: Api[Any, RespT],
        body: Any,
        *,
        timeout_s: float | None = None,
        version: int | None = None,
    ) -> RespT:
        """Send a request and return its response body (raising the broker's error)."""
        future = await self.request(api, body, timeout_s=timeout_s, version=version)
        return await future

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._close_reason is None:
            self._close_reason = exc
        self._shut_down()

    def data_received(self, data: bytes) -> None:
        if not self._heard:
            self._heard = True
            if not self._tls and data.startswith(TLS_RECORDS):
                self.close(tls_answer(self.host, self.port))
                return
        try:
            self._decoder.feed(data)
            for envelope in self._decoder.frames():
                self._resolve(envelope)
        except ProtocolError as exc:
            log.warning("closing %s:%d: %s", self.host, self.port, exc)
            self.close(exc)

    def eof_received(self) -> bool | None:
        if not self._heard and not self._tls:
            self.close(
                NetworkError(
                    "the broker closed the connection before answering anything (if its "
                    "listener uses TLS, set security_protocol='SSL' or 'SASL_SSL')"
                )
            )
            return None
        self.close(NetworkError("the broker closed the connection"))
        return None

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_room()

    # -- internals ------------------------------------------------------------------------

    def _resolve(self, envelope: ResponseEnvelope) -> None:
        entry = self._pending.pop(envelope.correlation_id, None)
        if entry is None:
            log.debug("response %d matches no pending request", envelope.correlation_id)
            return
        future, api, version, timer = entry
        if timer is not None:
            timer.cancel()
        body = envelope.body
        if type(body) is dict and THROTTLE_TIME_KEY in body:
            self._throttled(body[THROTTLE_TIME_KEY])
        self._wake_room()
        if future.done():  # cancelled by its caller
            return
        try:
            response = decode_response(envelope, api, version)
        except ProtocolError as exc:
            future.set_exception(exc)
            raise
        error = response.error
        if error is None:
            future.set_result(response.body)
        else:
            future.set_exception(error)

    def _throttled(self, ms: object) -> None:
        """The broker asked for ``ms`` milliseconds of quiet on this connection."""
        if type(ms) is not int or ms <= 0:
            return
        self.throttled_ms += ms
        until = self._loop.time() + min(ms / 1000, MAX_THROTTLE_S)
        if until <= self._throttled_until:
            return
        self._throttled_until = until
        if self._throttle is not None:
            self._throttle.cancel()
        self._throttle = self._loop.call_at(until, self._throttle_over)

    def _throttle_over(self) -> None:
        self._throttle = None
        self._wake_room()

    def _timed_out(self, cid: int) -> None:
        entry = self._pending.pop(cid, None)
        if entry is None:
            return
        error = RequestTimedOutError(
            f"{entry.api.name} to {self.host}:{self.port} got no response in time"
        )
        if not entry.future.done():
            entry.future.set_exception(error)
        self.close(error)

    def _network_error(self) -> NetworkError:
        reason = self._close_reason
        suffix = f": {reason}" if reason is not None else ""
        error = NetworkError(f"connection to {self.host}:{self.port} is closed{suffix}")
        error.__cause__ = reason
        return error

    def _shut_down(self) -> None:
        if self._closed.done():
            return
        if self._throttle is not None:
            self._throttle.cancel()
            self._throttle = None
        self._closed.set_result(None)
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if entry.timer is not None:
                entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_exception(self._network_error())
        self._wake_room()

    def _wake_room(self) -> None:
        room = self._room
        if room is not None and not room.done() and (self.ready or self.closed):
            room.set_result(None)


TLS_RECORDS = (b"\x15\x03", b"\x16\x03")
"""The start of a TLS alert or handshake record: what a TLS listener sends a client that
does not speak TLS (as an mq frame's length prefix it would be ~350 MB)."""


def tls_answer(host: str, port: int) -> TlsMismatchError:
    return TlsMismatchError(
        f"{host}:{port} answered with TLS: its listener is ssl or sasl_ssl; set "
        "security_protocol='SSL' or 'SASL_SSL' (and ssl_cafile or ssl_context)"
    )


def tls_failure(host: str, port: int, exc: BaseException) -> MQError:
    """A failed TLS handshake as an MQError that says what probably happened."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsMismatchError(
            f"{host}:{port}: the broker's certificate is refused: {exc.verify_message} "
            "(check ssl_cafile, the certificate's host names and dates)"
        )
    if isinstance(exc, ssl.SSLError) and "WRONG_VERSION_NUMBER" not in str(exc):
        return TlsMismatchError(f"{host}:{port}: the TLS handshake failed: {exc}")
    return TlsMismatchError(
        f"{host}:{port}: the TLS handshake failed ({exc}): the broker's listener there is "
        "probably plaintext (or sasl_plaintext); set security_protocol to 'PLAINTEXT' or "
        "'SASL_PLAINTEXT', or connect to its TLS listener"
    )


def error_from(exc: BaseException) -> MQError:
    """``exc`` as an MQError: OS-level socket errors become a retriable NetworkError."""
    if isinstance(exc, MQError):
        return exc
    error = NetworkError(f"{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error

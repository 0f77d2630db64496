"""The shared core of every client: bootstrap, a connection pool, metadata, breakers.

A :class:`Client` knows the cluster through a
:class:`~mq.client.metadata.ClusterMetadata` cache that a background task
keeps fresh (on request after a stale-metadata error, with backoff, and at
its max age), and talks to brokers through one pooled
:class:`~mq.client.connection.Connection` per broker address. The producer,
the consumer and the admin client each own one.

Each broker address has a :class:`~mq.client.breaker.CircuitBreaker`: after
``breaker_threshold`` consecutive network failures (failed connects, lost
connections, timed-out requests) requests to that broker fail at once with a
retriable :class:`~mq.errors.BrokerUnavailableError` for a cooldown,
instead of each paying a connect timeout; then one trial request is let
through, and its outcome closes or reopens the breaker.

Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from mq.client.breaker import (
    DEFAULT_BREAKER_COOLDOWN_S,
    DEFAULT_BREAKER_THRESHOLD,
    Address,
    CircuitBreaker,
    parse_bootstrap,
)
from mq.client.connection import DEFAULT_MAX_IN_FLIGHT, Connection
from mq.client.metadata import ClusterMetadata, needs_metadata_refresh
from mq.client.security import Security
from mq.errors import (
    BrokerUnavailableError,
    ClientStateError,
    MQError,
    NetworkError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from mq.wire.apis_core import METADATA, MetadataResponse
from mq.wire.registry import Api

log = logging.getLogger(__name__)

RespT = TypeVar("RespT")


class Client:
    """Bootstrap, pooled connections per broker, metadata refresh, circuit breakers."""

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        client_id: str = "mq-python",
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        metadata_max_age_s: float = 300.0,
        retry_backoff_s: float = 0.1,
        retry_backoff_max_s: float = 1.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        allow_auto_topic_creation: bool = False,
        breaker_threshold: int = DEFAULT_BREAKER_THRESHOLD,
        breaker_cooldown_s: float = DEFAULT_BREAKER_COOLDOWN_S,
        security: Security | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security
        """TLS and SASL for every connection (:mod:`mq.client.security`); None: plaintext."""
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.max_in_flight = max_in_flight
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.metadata = ClusterMetadata(
            max_age_s=metadata_max_age_s,
            backoff_s=retry_backoff_s,
            backoff_max_s=retry_backoff_max_s,
        )
        self._breaker_args = (breaker_threshold, breaker_cooldown_s)
        self._breakers: dict[Address, CircuitBreaker] = {}
        self._conns: dict[Address, Connection] = {}
        self._connecting: dict[Address, asyncio.Task[Connection]] = {}
        self._topics: set[str] = set()
        self._refreshing: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._wake_refresher = asyncio.Event()
        self._metadata_listeners: list[Callable[[], None]] = []
        self._bootstrap_next = 0
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch the first metadata (raises NetworkError if no bootstrap broker answers);
        on failure the connections opened meanwhile are closed (start may be retried)."""
        try:
            await self.refresh_metadata()
        except BaseException:
            await self._close_connections()
            raise
        self._refresher = asyncio.get_running_loop().create_task(
            self._refresh_loop(), name="mq-metadata"
        )

    async def close(self) -> None:
        self._closed = True
        for task in (self._refresher, self._refreshing, *self._connecting.values()):
            if task is not None:
                task.cancel()
        for task in (self._refresher, self._refreshing):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, MQError):
                    await task
        await self._close_connections()

    async def _close_connections(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()

    # -- connections ------------------------------------------------------------------------

    def address_of(self, node_id: int) -> Address:
        info = self.metadata.broker(node_id)
        if info is None:
            raise NetworkError(f"broker {node_id} is not in the cluster metadata")
        return (info.host, info.port)

    def breaker(self, address: Address) -> CircuitBreaker:
        found = self._breakers.get(address)
        if found is None:
            found = self._breakers[address] = CircuitBreaker(*self._breaker_args)
        return found

    def pooled(self, address: Address) -> Connection | None:
        """The open pooled connection to ``address``, if there is one (never connects)."""
        conn = self._conns.get(address)
        return None if conn is None or conn.closed else conn

    async def connection(self, node_id: int) -> Connection:
        """The pooled connection to a broker by node id (connecting if needed)."""
        return await self.connection_to(self.address_of(node_id))

    async def connection_to(self, address: Address) -> Connection:
        """The pooled connection to ``address``; fails fast while its breaker is open."""
        if self._closed:
            raise ClientStateError("the client is closed")
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        breaker = self.breaker(address)
        now = time.monotonic()
        if not breaker.allow(now):
            raise BrokerUnavailableError(
                f"{address[0]}:{address[1]} failed {breaker.failures} times in a row; "
                f"retrying in {breaker.retry_after(now):.1f}s"
            )
        task = self._connecting.get(address)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect(address))
            self._connecting[address] = task
        return await asyncio.shield(task)

    async def _connect(self, address: Address) -> Connection:
        try:
            conn = await Connection.open(
                *address,
                connect_timeout_s=self.connect_timeout_s,
                client_id=self.client_id,
                request_timeout_s=self.request_timeout_s,
                max_in_flight=self.max_in_flight,
                security=self.security,
            )
        except MQError:
            self.breaker(address).record_failure(time.monotonic())
            raise
        finally:
            self._connecting.pop(address, None)
        self.breaker(address).record_success()
        self._conns[address] = conn
        return conn

    def track(self, address: Address, future: asyncio.Future[Any]) -> None:
        """Feed a request's outcome to the breaker, and stale-metadata errors to the cache."""
        future.add_done_callback(lambda f: self._outcome(address, f))

    def _outcome(self, address: Address, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if isinstance(error, NetworkError | RequestTimedOutError):
            self.breaker(address).record_failure(time.monotonic())
            self.request_metadata_update()
        else:
            self.breaker(address).record_success()

    async def request(
        self,
        node_id: int,
        api: Api[Any, RespT],
        body: Any,
        *,
        timeout_s: float | None = None,
        expect_response: bool = True,
    ) -> asyncio.Future[RespT]:
        """Write a request to a broker and return the future of its response body."""
        address = self.address_of(node_id)
        conn = await self.connection_to(address)
        future = await conn.request(api, body, timeout_s=timeout_s, expect_response=expect_response)
        self.track(address, future)
        return future

    async def call(
        self, node_id: int, api: Api[Any, RespT], body: Any, *, timeout_s: float | None = None
    ) -> RespT:
        """Send a request to a broker and return its response body (or raise its error)."""
        return await (await self.request(node_id, api, body, timeout_s=timeout_s))

    async def call_address(
        self, address: Address, api: Api[Any, RespT], body: Any, *, timeout_s: float | None = None
    ) -> RespT:
        """:meth:`call` by broker address (e.g. a group coordinator found by lookup)."""
        conn = await self.connection_to(address)
        future = await conn.request(api, body, timeout_s=timeout_s)
        self.track(address, future)
        return await future

    async def call_any(self, api: Api[Any, RespT], body: Any) -> RespT:
        """Send a request to any broker that answers: known brokers first, then bootstrap.
        A connection error that retrying cannot cure (a refused TLS handshake:
        :class:`~mq.errors.TlsMismatchError`) is raised at once, as it is."""
        last: MQError | None = None
        for address in self._candidates():
            try:
                conn = await self.connection_to(address)
                future = await conn.request(api, body)
                self.track(address, future)
                return await future
            except (NetworkError, RequestTimedOutError) as exc:
                if not exc.retriable:  # a refused TLS handshake: another broker won't help
                    raise
                last = exc
        raise NetworkError(f"no broker answered {api.name}: {last}") from last

    def _candidates(self) -> list[Address]:
        """Addresses to try for a request any broker can answer, least loaded first."""
        known = [(b.host, b.port) for b in self.metadata.brokers.values()]
        start = self._bootstrap_next % len(self.bootstrap)
        self._bootstrap_next += 1
        rotated = self.bootstrap[start:] + self.bootstrap[:start]
        seen: set[Address] = set()
        out = []
        for address in sorted(known, key=self._load) + rotated:
            if address not in seen:
                seen.add(address)
                out.append(address)
        return out

    def _load(self, address: Address) -> tuple[int, int]:
        conn = self._conns.get(address)
        if conn is None or conn.closed:
            return (1, 0)
        return (0, conn.in_flight)

    # -- metadata ---------------------------------------------------------------------------

    def topics(self) -> set[str]:
        """The topics whose metadata this client keeps."""
        return set(self._topics)

    def add_topics(self, topics: Iterable[str]) -> None:
        """Keep metadata for these topics too (a refresh is requested if one is new)."""
        new = set(topics) - self._topics
        if new:
            self._topics |= new
            self.metadata.request_update_for_new_topics()
            self._wake_refresher.set()

    def set_topics(self, topics: Iterable[str]) -> None:
        """Keep metadata for exactly these topics from the next refresh on."""
        wanted = set(topics)
        if wanted != self._topics:
            if wanted - self._topics:
                self.metadata.request_update_for_new_topics()
            self._topics = wanted
            self.request_metadata_update()

    def add_metadata_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every metadata update (e.g. to wake a sender)."""
        self._metadata_listeners.append(listener)

    def request_metadata_update(self) -> None:
        self.metadata.request_update()
        self._wake_refresher.set()

    def note_error(self, error: BaseException) -> None:
        """Request a metadata refresh if ``error`` means the cache is stale."""
        if needs_metadata_refresh(error):
            self.request_metadata_update()

    async def refresh_metadata(self) -> None:
        """Refresh now (joining a refresh already under way)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh())
        await asyncio.shield(self._refreshing)

    async def _refresh(self) -> None:
        wanted = sorted(self._topics)
        body = {"topics": wanted, "allow_auto_topic_creation": self.allow_auto_topic_creation}
        self.metadata.attempt_started(time.monotonic())
        try:
            response: MetadataResponse = await self.call_any(METADATA, body)
        except MQError:
            self.metadata.failed_update(time.monotonic())
            raise
        self.metadata.update(response, time.monotonic(), wanted=wanted)
        for listener in self._metadata_listeners:
            listener()

    async def fetch_all_metadata(self) -> MetadataResponse:
        """Metadata of every topic (for admin listings); refreshes the cache as well."""
        response: MetadataResponse = await self.call_any(
            METADATA, {"topics": None, "allow_auto_topic_creation": False}
        )
        self.metadata.update(response, time.monotonic(), wanted=sorted(self._topics))
        for listener in self._metadata_listeners:
            listener()
        return response

    async def _refresh_loop(self) -> None:
        while True:
            delay = self.metadata.time_to_next_update(time.monotonic())
            if delay > 0:
                self._wake_refresher.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake_refresher.wait()
                continue
            try:
                await self.refresh_metadata()
            except MQError as exc:
                log.debug("metadata refresh failed: %s", exc)

    async def wait_for_topics(self, topics: Iterable[str], timeout_s: float) -> None:
        """Wait until every topic in ``topics`` has a leader for each partition.

        Raises UnknownTopicOrPartitionError (or RequestTimedOutError) after
        ``timeout_s`` if one is still unknown (or leaderless), and at once the
        error of a topic the broker refuses for good (not retriable: say, an
        auto-creation past a broker's partition limit, POLICY_VIOLATION).
        """
        wanted = set(topics)
        self.add_topics(wanted)
        deadline = time.monotonic() + timeout_s
        while missing := self.metadata.missing(wanted):
            for name in sorted(missing):
                code = self.metadata.topic_errors.get(name, 0)
                if code and not error_for_code(code).retriable:
                    why = self.metadata.topic_messages.get(name, "the broker refuses it")
                    raise error_for_code(code)(f"topic {name!r}: {why}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                unknown = [t for t in missing if t in self.metadata.topic_errors]
                if unknown:
                    raise UnknownTopicOrPartitionError(f"topics {sorted(unknown)} do not exist")
                raise RequestTimedOutError(f"no leader for every partition of {sorted(missing)}")
            self.request_metadata_update()
            delay = min(self.metadata.time_to_next_update(time.monotonic()), remaining)
            if delay > 0:
                await asyncio.sleep(delay)
            with contextlib.suppress(MQError):
                await self.refresh_metadata()

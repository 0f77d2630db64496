"""Connections from this broker to the others, for requests it forwards.

Topic changes (and the other controller APIs) may reach any broker; one that
is not the controller forwards the request, as it came, to the one that is
and answers with its response (Kafka's KIP-590 forwarding). The controller is
whoever the view says; while there is none, the call waits for one (bounded).
Share groups write their state and dead letters to partitions led elsewhere
through :meth:`Peers.call_leader`.

Each peer address has a circuit breaker (:mod:`mq.replication.breakers`,
issue 20): a peer that fails to connect or answer ``threshold`` times in a
row fails further calls at once (NetworkError) until a cool-down has passed
and a trial call succeeds, instead of each call waiting out its timeout.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from mq.client.connection import Connection
from mq.errors import (
    LeaderNotAvailableError,
    MQError,
    NetworkError,
    NotControllerError,
    RequestTimedOutError,
)
from mq.replication.breakers import Breakers
from mq.replication.hello import open_broker_connection
from mq.wire.registry import Api

if TYPE_CHECKING:
    from mq.broker.broker import Broker

RespT = TypeVar("RespT")
WAIT_S = 10.0
RETRY_S = 0.1


class Peers:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._connections: dict[tuple[str, int], Connection] = {}
        self.breakers = Breakers()

    async def call_controller(
        self, api: Api[Any, RespT], body: Any, here: Callable[[], Awaitable[RespT]]
    ) -> RespT:
        """Send ``body`` to the controller and return its answer, or ``here()`` once this
        broker is the controller itself. Waits (bounded, :data:`WAIT_S`) while there is
        none, and while the view already names this broker but its controller seat is
        not active yet (it is loading the cluster state): a request arriving in that
        window is neither forwarded to itself nor refused."""
        broker = self._broker
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while True:
            if broker.is_controller:
                return await here()
            controller = broker.view.controller
            info = broker.view.brokers.get(controller.node_id) if controller else None
            if info is not None and controller is not None and controller.node_id != broker.node_id:
                try:
                    return await self._call((info.host, info.port), api, body)
                except NetworkError:
                    pass
            if loop.time() >= deadline:
                raise NotControllerError("no controller could be reached")
            await asyncio.sleep(RETRY_S)

    async def call_leader(self, topic: str, index: int, api: Api[Any, RespT], body: Any) -> RespT:
        """Send ``body`` to the broker the view says leads ``topic``-``index`` (once; the
        caller retries on NOT_LEADER, which it gets as an error in the response)."""
        broker = self._broker
        state = broker.view.partitions.get((topic, index))
        info = broker.view.brokers.get(state.leader) if state is not None else None
        if info is None or state is None:
            raise LeaderNotAvailableError(f"{topic}-{index} has no live leader")
        return await self._call((info.host, info.port), api, body)

    async def _call(self, address: tuple[str, int], api: Api[Any, RespT], body: Any) -> RespT:
        """One request to a peer, through its circuit breaker."""

        async def send() -> RespT:
            connection = await self._connection(address)
            return await connection.call(api, body, timeout_s=WAIT_S)

        return await self.breakers.call(
            f"peer {address[0]}:{address[1]}",
            send,
            (NetworkError, RequestTimedOutError, OSError),
            _unavailable,
        )

    async def call_node(self, node_id: int, api: Api[Any, RespT], body: Any) -> RespT:
        """Send ``body`` to the live broker ``node_id`` (this one too) as a broker, once
        (the HTTP admin API reads groups, queues, offsets and records this way)."""
        info = self._broker.view.brokers.get(node_id)
        if info is None:
            raise LeaderNotAvailableError(f"broker {node_id} is not alive")
        connection = await self._connection((info.host, info.port))
        return await connection.call(api, body, timeout_s=WAIT_S)

    async def _connection(self, address: tuple[str, int]) -> Connection:
        found = self._connections.get(address)
        if found is not None and not found.closed:
            return found
        connection = await open_broker_connection(
            *address, self._broker.credentials, client_id=f"mq-broker-{self._broker.node_id}"
        )
        self._connections[address] = connection
        return connection

    async def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


def _unavailable(message: str) -> MQError:
    return NetworkError(message)

"""RabbitMQ quorum queues and streams with aio-pika, Debian's ``rabbitmq-server``.

The node is private: ``/usr/lib/rabbitmq/bin/rabbitmq-server`` run directly
(the ``/usr/sbin`` wrapper would ``su`` to the ``rabbitmq`` user), named
``mqbench-PORT@localhost``, AMQP on 127.0.0.1:PORT, Erlang distribution on
127.0.0.1 only, with its ``rabbitmq.conf``, an empty ``enabled_plugins`` (no
management plugin), an empty ``rabbitmq-env.conf``, its Mnesia, quorum and
stream data, logs and ``.erlang.cookie`` (``HOME``) all in the temporary
directory; its log goes to stdout. Starting it also starts ``epmd`` on
127.0.0.1:4369 if none runs (``ERL_EPMD_ADDRESS``): epmd daemonizes out of the
node's process group, is shared by every Erlang node on the machine, and is
left running when the node stops (it holds no data and answers on loopback only).

Best practice from aio-pika's port of the publisher-confirms tutorial: one
channel in confirm mode, every message published to the default exchange as
its own task (:meth:`aio_pika.Exchange.publish`) with ``delivery_mode``
persistent, at most :data:`WINDOW` confirms outstanding, awaited
:data:`CHUNK` at a time, oldest first. aiormq serializes publishes on the
channel with a FIFO lock in the order the tasks first run, which is the order
they were created, and holds it until the publish is written to the socket: one
``send(2)`` per message, which is what limits W1 and W2 here. Consuming: a
consumer with prefetch :data:`PREFETCH` and manual acknowledgements,
``multiple=True`` once per batch (whatever arrived since the last batch); a
stream is read from ``x-stream-offset: first``
(streams require prefetch and manual acks, which only return credit).

Durability, one node: a quorum queue confirms a publish once its Raft log
entry is in Ra's write-ahead log and the WAL has been fsynced (``fdatasync``,
batched across writers); a stream confirms once the chunk is written to its
segment file, which osiris never fsyncs (it relies on replicas, and with one
node on the OS page cache), so it survives a broker crash but not a machine
crash.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
)
from pamqp.common import Arguments

from benchmarks.peers.base import Adapter, Server, free_port, require

WINDOW = 4_000
"""Publishes whose confirms may be outstanding at once."""
CHUNK = 1_000
"""How many of the oldest outstanding confirms are awaited together when the window is full."""
PREFETCH = 2_000
"""Unacknowledged deliveries the broker may have in flight to the consumer."""
READY_TIMEOUT_S = 90.0
"""How long the node may take to boot: until the port answers, then until AMQP works."""
QUEUE_POLL_S = 0.05
"""How often a consumer started before ``prepare`` looks again for its queue."""
_VERSION = re.compile(r"Starting RabbitMQ (\d+)\.(\d+)")


class RabbitMQ(Adapter):
    def __init__(self, queue_type: str = "quorum") -> None:
        super().__init__()
        if queue_type not in ("quorum", "stream"):
            raise ValueError(f"queue type {queue_type!r}: quorum or stream")
        self.queue_type = queue_type
        self.kind = "quorum queue" if queue_type == "quorum" else "stream"
        self.system = f"RabbitMQ {self.kind}"
        self.durability = (
            "quorum queue (1 node), publisher confirms after WAL fsync"
            if queue_type == "quorum"
            else "stream (1 node), publisher confirms, no fsync"
        )
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._in_order: asyncio.Lock | None = None
        self._subscriptions: set[_Subscription] = set()

    def start_server(self, directory: Path) -> Server:
        found = Path(require("rabbitmq-server", "rabbitmq-server"))
        direct = found.resolve().parent / "rabbitmq-server"  # past /usr/sbin's `su rabbitmq`
        binary = direct if os.access(direct, os.X_OK) else found
        self.port, dist_port = free_port(), free_port()
        while dist_port == self.port:
            dist_port = free_port()
        node = f"mqbench-{self.port}"
        (directory / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            "log.console = true\n"
            "log.console.level = info\n"
            "log.file = false\n"
        )
        (directory / "enabled_plugins").write_text("[].\n")
        (directory / "rabbitmq-env.conf").write_text("")
        env = {
            "HOME": str(directory),
            "RABBITMQ_NODENAME": f"{node}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
            "RABBITMQ_MNESIA_DIR": str(directory / "mnesia" / node),
            "RABBITMQ_LOG_BASE": str(directory / "log"),
            "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(directory / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(directory / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(directory / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(directory / "rabbitmq.pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        started = time.monotonic()
        server = Server(
            [str(binary)],
            port=self.port,
            log=directory / "rabbitmq.log",
            env=env,
            ready_timeout_s=READY_TIMEOUT_S,
        )
        try:  # the listener opens a moment before the boot completes
            remaining = READY_TIMEOUT_S - (time.monotonic() - started)
            asyncio.run(_until_it_serves(self._url, max(remaining, 10.0)))
        except BaseException:
            server.stop()
            raise
        found_version = _VERSION.search(server.log.read_text(errors="replace"))
        version = ".".join(found_version.groups()) if found_version else "?"
        self.system = f"RabbitMQ {version} {self.kind}"
        return server

    @property
    def _url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def connection(self) -> AbstractConnection:
        if self._connection is None:
            raise RuntimeError("not connected")
        return self._connection

    @property
    def exchange(self) -> AbstractExchange:
        if self._channel is None:
            raise RuntimeError("not connected")
        return self._channel.default_exchange

    async def connect(self) -> None:
        self._in_order = asyncio.Lock()
        self._connection = await aio_pika.connect(self._url)
        self._channel = await self._connection.channel(publisher_confirms=True)

    async def close(self) -> None:
        for subscription in list(self._subscriptions):  # a consumer the caller left suspended
            await subscription.finish()
        self._subscriptions.clear()
        connection, self._connection, self._channel = self._connection, None, None
        self._in_order = None
        if connection is not None:
            await connection.close()

    def __getstate__(self) -> dict[str, object]:
        """What W4's consumer process gets: the configuration, never a live object."""
        live: dict[str, object] = {"_connection": None, "_channel": None, "_in_order": None}
        live["_subscriptions"] = set()
        return {**self.__dict__, **live}

    async def prepare(self, stream: str) -> None:
        channel = await self.connection.channel()
        try:
            await channel.queue_delete(stream)
            await channel.declare_queue(
                stream, durable=True, arguments={"x-queue-type": self.queue_type}
            )
        finally:
            await channel.close()

    def _message(self, value: bytes) -> aio_pika.Message:
        return aio_pika.Message(value, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)

    async def produce(self, stream: str, values: Sequence[bytes]) -> int:
        exchange, message = self.exchange, self._message
        pending: deque[asyncio.Task[object]] = deque()
        confirmed = 0
        for value in values:
            pending.append(asyncio.create_task(exchange.publish(message(value), stream)))
            if len(pending) >= WINDOW:
                confirmed += await _acked([pending.popleft() for _ in range(CHUNK)])
        return confirmed + await _acked(list(pending))

    async def consume(self, stream: str, count: int) -> AsyncIterator[list[bytes]]:
        arrived: list[AbstractIncomingMessage] = []
        wake = asyncio.Event()

        async def deliver(message: AbstractIncomingMessage) -> None:
            arrived.append(message)  # aiormq runs one task per delivery, in delivery order
            wake.set()

        got = 0
        subscription = _Subscription(*await self._existing_queue(stream))
        self._subscriptions.add(subscription)
        try:
            await subscription.channel.set_qos(prefetch_count=PREFETCH)
            start: Arguments = {"x-stream-offset": "first"} if self.kind == "stream" else None
            await subscription.queue.consume(deliver, arguments=start)
            while got < count:
                await wake.wait()
                wake.clear()
                if not arrived:
                    continue
                batch = arrived.copy()
                arrived.clear()
                got += len(batch)
                subscription.unacked = batch[-1]
                yield [message.body for message in batch]
                await subscription.ack()
        finally:  # also when the caller stops at `count`, is cancelled, or closes first
            self._subscriptions.discard(subscription)
            await asyncio.shield(subscription.finish())

    async def _existing_queue(self, stream: str) -> tuple[AbstractChannel, AbstractQueue]:
        """A channel and ``stream``'s queue, waiting for ``prepare`` to declare it (W4)."""
        while True:
            channel = await self.connection.channel()
            try:
                return channel, await channel.declare_queue(stream, passive=True)
            except aio_pika.exceptions.ChannelNotFoundEntity:
                pass  # the broker closed the channel
            await asyncio.sleep(QUEUE_POLL_S)

    async def send_now(self, stream: str, values: Sequence[bytes]) -> None:
        if self._in_order is None:
            raise RuntimeError("not connected")
        exchange, message = self.exchange, self._message
        async with self._in_order:
            tasks = [asyncio.create_task(exchange.publish(message(v), stream)) for v in values]
            # one step of each: each publish now holds or waits on aiormq's FIFO channel lock,
            # so a later burst's publishes queue behind this one's
            await asyncio.sleep(0)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failed = [r for r in results if not isinstance(r, aiormq.spec.Basic.Ack)]
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(values)} not confirmed: {failed[0]!r}")


class _Subscription:
    """A consumer's channel and queue, and its delivery that is not acknowledged yet."""

    def __init__(self, channel: AbstractChannel, queue: AbstractQueue) -> None:
        self.channel = channel
        self.queue = queue
        self.unacked: AbstractIncomingMessage | None = None
        self._finished: asyncio.Future[None] | None = None

    async def ack(self) -> None:
        """Acknowledge every delivery up to ``unacked``, once (also if cancelled meanwhile)."""
        message, self.unacked = self.unacked, None
        if message is not None and not self.channel.is_closed:
            await message.ack(multiple=True)

    def finish(self) -> asyncio.Future[None]:
        """Acknowledge what was handed out and close the channel (cancelling the consumer)."""
        if self._finished is None:
            self._finished = asyncio.ensure_future(self._finish())
        return self._finished

    async def _finish(self) -> None:
        try:
            await self.ack()
            if not self.channel.is_closed:
                await self.channel.close()
        except (aiormq.exceptions.AMQPError, ConnectionError, RuntimeError):
            pass  # the connection is gone already


async def _acked(tasks: list[asyncio.Task[object]]) -> int:
    """How many of these publishes the broker acknowledged (not nacked, returned or failed)."""
    results = await asyncio.gather(*tasks, return_exceptions=True)
    return sum(1 for r in results if isinstance(r, aiormq.spec.Basic.Ack))


async def _until_it_serves(url: str, timeout_s: float) -> None:
    """Return once an AMQP connection to ``url`` opens, or raise after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            connection = await aio_pika.connect(url, timeout=5)
        except Exception as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"RabbitMQ did not accept AMQP connections: {exc!r}") from exc
            await asyncio.sleep(0.2)
        else:
            await connection.close()
            return


def adapters() -> list[Adapter]:
    return [RabbitMQ("quorum"), RabbitMQ("stream")]

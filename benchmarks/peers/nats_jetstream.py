"""NATS JetStream with nats-py's asyncio client, Debian's ``nats-server``, file storage.

Each workload stream is a JetStream stream of the same name (limits
retention, one replica, file storage) that captures the one subject of that
name. Durability: a single 2.9 server writes each message to its block file
(the page cache) before it sends the PubAck, and fsyncs on a timer, every
2 minutes: 2.9's fixed default, as ``strace`` shows (2.9 has no
``sync_interval`` option, so no "sync always" variant here). A PubAck
survives a crash of the server, not of the machine.

Best practice from the client: JetStream's asynchronous publish, which is a
core NATS publish with a reply subject, the PubAck arriving there. nats-py's
``js.publish_async`` does that with a Future, a random token and a semaphore
per message: 17k msg/s at 45 µs of client CPU a message here. So the same
protocol is used directly (35k msg/s, 18 µs): a burst's messages share one
reply subject under one wildcard inbox subscription, each ack is checked (no
error, stream sequence increasing) and counted for its burst, and
:data:`IN_FLIGHT` bursts of :data:`BURST` are outstanding (``publish_async``'s
default is 4,000). One connection writes in call order, so the stream keeps
the send order; W4's concurrent bursts take a lock only while they write.

Reading is an ordered push consumer (``js.subscribe(ordered_consumer=True)``:
ephemeral, no acks, flow control; the client checks the sequence and
recreates it on a gap), NATS's own way to read a stream in order, as mq's W3
reads without committing; a callback appends each message to the batch the
generator hands out. It read 50-65k msg/s at 12 µs client and 3 µs server CPU
a message, a durable pull consumer with ``fetch(1000)`` and AckAll on each
batch's last message 15k msg/s at 50 µs client (``fetch`` awaits a task per
message, and a lingering fetch holds a partial batch until it expires: bad for
W4).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from benchmarks.peers.base import Adapter, Server, free_port, require

BURST = 1_000
"""Messages of ``produce`` that share one reply subject (one ack future)."""
IN_FLIGHT = 4
"""Bursts ``produce`` keeps unacknowledged."""
ACK_TIMEOUT_S = 30.0
STREAM_WAIT_S = 30.0
"""How long ``consume`` waits for ``prepare`` (in the other process) to create the stream."""
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


def _name(stream: str) -> str:
    """The stream's JetStream name, also its subject: no '.', '*', '>' or spaces."""
    return _NOT_A_NAME.sub("_", stream)


@dataclass
class _Burst:
    """PubAcks still due on one reply subject."""

    remaining: int
    confirmed: int = 0
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class _Confirms:
    """PubAcks arriving on one wildcard inbox, counted per burst."""

    def __init__(self, inbox: str) -> None:
        self.inbox = inbox
        self._bursts: dict[str, _Burst] = {}
        self._next = 0
        self._last_seq: dict[str, int] = {}

    def open(self, size: int) -> tuple[str, _Burst]:
        """A reply subject for ``size`` messages and what waits for their acks."""
        self._next += 1
        subject, burst = f"{self.inbox}.{self._next}", _Burst(size)
        if size:
            self._bursts[subject] = burst
        else:
            burst.done.set_result(None)
        return subject, burst

    async def on_ack(self, msg: Msg) -> None:
        burst = self._bursts.get(msg.subject)
        if burst is None:
            return
        if not msg.headers:  # else a status, such as 503 no responders
            ack = json.loads(msg.data)
            if "error" not in ack and not ack.get("duplicate"):
                stream, seq = ack["stream"], ack["seq"]
                if seq > self._last_seq.get(stream, 0):
                    self._last_seq[stream] = seq
                    burst.confirmed += 1
        burst.remaining -= 1
        if burst.remaining == 0:
            del self._bursts[msg.subject]
            burst.done.set_result(None)

    async def settled(self, burst: _Burst) -> int:
        """How many of the burst's messages were confirmed, waiting (bounded) for every ack."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(burst.done), ACK_TIMEOUT_S)
        return burst.confirmed


class NatsJetStream(Adapter):
    def __init__(self) -> None:
        super().__init__()
        self.system = "NATS JetStream"
        self.durability = "file, fsync every 2 min"
        self._client: Client | None = None
        self._js: JetStreamContext | None = None
        self._confirms: _Confirms | None = None
        self._reading: list[Subscription] = []
        self._in_order = asyncio.Lock()

    def start_server(self, directory: Path) -> Server:
        binary = require("nats-server", "nats-server")
        version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"v(\d+\.\d+)", version)
        self.system = f"NATS {found.group(1) if found else '?'} JetStream"
        self.port = free_port()
        # -sd: JetStream keeps its files in <dir>/jetstream; no -m: no monitoring port
        argv = [binary, "-js", "-sd", str(directory), "-a", "127.0.0.1", "-p", str(self.port)]
        return Server(argv, port=self.port, log=directory / "nats-server.log")

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("not connected")
        return self._client

    @property
    def js(self) -> JetStreamContext:
        if self._js is None:
            raise RuntimeError("not connected")
        return self._js

    @property
    def confirms(self) -> _Confirms:
        if self._confirms is None:
            raise RuntimeError("not connected")
        return self._confirms

    async def connect(self) -> None:
        self._client = await nats.connect(
            f"nats://127.0.0.1:{self.port}",
            name="mq-benchmark",
            allow_reconnect=False,
            connect_timeout=10,
        )
        self._js = self._client.jetstream()
        self._confirms = _Confirms(self._client.new_inbox())
        await self._client.subscribe(f"{self._confirms.inbox}.*", cb=self._confirms.on_ack)
        self._reading = []
        self._in_order = asyncio.Lock()

    async def close(self) -> None:
        if self._client is None:
            return
        for sub in self._reading:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        with contextlib.suppress(nats.errors.Error):
            await self._client.close()
        self._client = self._js = self._confirms = None
        self._reading = []
        self._in_order = asyncio.Lock()  # one a waiter bound to this loop does not pickle

    async def prepare(self, stream: str) -> None:
        name = _name(stream)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self.js.delete_stream(name)
        await self.js.add_stream(
            StreamConfig(
                name=name,
                subjects=[name],
                storage=StorageType.FILE,
                retention=RetentionPolicy.LIMITS,
                discard=DiscardPolicy.OLD,
                num_replicas=1,
                max_msgs=-1,
                max_bytes=-1,
            )
        )

    async def _publish(self, subject: str, values: Sequence[bytes]) -> _Burst:
        reply, burst = self.confirms.open(len(values))
        publish = self.client.publish
        for value in values:
            await publish(subject, value, reply=reply)
        return burst

    async def produce(self, stream: str, values: Sequence[bytes]) -> int:
        subject, confirmed = _name(stream), 0
        waiting: list[_Burst] = []
        for at in range(0, len(values), BURST):
            if len(waiting) >= IN_FLIGHT:
                confirmed += await self.confirms.settled(waiting.pop(0))
            waiting.append(await self._publish(subject, values[at : at + BURST]))
        for burst in waiting:
            confirmed += await self.confirms.settled(burst)
        return confirmed

    async def consume(self, stream: str, count: int) -> AsyncIterator[list[bytes]]:
        name = _name(stream)
        arrived = asyncio.Event()
        batch: list[bytes] = []

        async def on_msg(msg: Msg) -> None:
            batch.append(msg.data)
            arrived.set()

        deadline = time.monotonic() + STREAM_WAIT_S
        while True:  # W4: the sender's prepare may not have created the stream yet
            try:
                sub = await self.js.subscribe(name, stream=name, cb=on_msg, ordered_consumer=True)
                break
            except nats.js.errors.NotFoundError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.02)
        self._reading.append(sub)
        got = 0
        while got < count:
            await arrived.wait()
            arrived.clear()
            out, batch = batch, []
            got += len(out)
            yield out

    async def send_now(self, stream: str, values: Sequence[bytes]) -> None:
        async with self._in_order:  # FIFO: bursts are written in the order they were due
            burst = await self._publish(_name(stream), values)
        confirmed = await self.confirms.settled(burst)
        if confirmed != len(values):
            raise RuntimeError(f"{confirmed} of {len(values)} confirmed")


def adapters() -> list[Adapter]:
    return [NatsJetStream()]

"""The chaos workloads, through the public client: a replicated log and a queue.

* :class:`LogWorkload`: idempotent producers (acks=all) write unique values
  (``"<producer>-<seq>"``) to a topic (RF 3, ``min.insync.replicas`` 2), each
  value to partition ``seq % partitions``; every attempt and every
  acknowledgement (partition, offset) goes to a :class:`LogHistory`.
  :meth:`LogWorkload.read_back` reads every partition from the start to its
  end offset at the end.
* :class:`QueueWorkload`: one sender and a few consumers (each a
  :class:`~mq.client.QueueClient` of its own) on a queue; every delivery and
  every ack attempt goes to a :class:`QueueHistory`. A few deliveries (a
  seeded choice) are left unacked so their leases run out and they come
  back. :meth:`QueueWorkload.drain` receives and acks until everything sent
  was acked (bounded).

Every task runs on one event loop: the histories need no lock. Every loop is
bounded by a stop event and a deadline; client errors (brokers down during a
fault) are counted and retried after :data:`ERROR_BACKOFF_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Mapping
from typing import Any

from mq.chaos.history import AckAttempt, Acked, Delivery, LogHistory, QueueHistory, Read
from mq.client import (
    Admin,
    Consumer,
    Producer,
    QueueClient,
    QueueMessage,
    RecordFuture,
    TopicPartition,
)
from mq.errors import MQError, TopicAlreadyExistsError

ERROR_BACKOFF_S = 0.2
"""Pause after a client error before the next attempt: a broker restarting needs a
moment, and a tight retry loop would steal the CPU the cluster needs to heal."""
SEND_BATCH = 20
"""Records a log producer sends per step before pausing :data:`SEND_PAUSE_S`."""
SEND_PAUSE_S = 0.02
"""Pause between steps: about 1,000 records/s per producer, enough to fill several
segments in a 20 s run without starving three brokers of the 2 cores they share."""
MAX_IN_FLIGHT = 2_000
"""Unacknowledged records a log producer has at most: bounds memory when the cluster
cannot take writes (a fault), the producer then waits."""
CLIENT_TIMEOUT_MS = 5_000
"""Request timeout of the workload clients: a request to a paused or partitioned
broker fails after this, and the client tries another."""
DELIVERY_TIMEOUT_MS = 30_000
"""How long a producer retries a record before failing it: longer than any fault."""
FINAL_READ_TIMEOUT_S = 60.0
"""Bound on reading the log back at the end (a healed cluster serves it in seconds)."""
RECEIVE_WAIT_S = 1.0
"""Long-poll wait of one receive: short, so that consumers notice the stop quickly."""
RECEIVE_MAX = 10
"""Messages one receive asks for."""
UNACKED_FRACTION = 0.05
"""Deliveries consumers leave unacked on purpose: they come back after the lease,
which exercises redelivery (and the double-lease check) on every run."""
SEND_CONCURRENCY = 10
"""Queue sends in flight at once."""
QUEUE_SEND_PAUSE_S = 0.02
"""Pause between the queue sender's steps (about 500 messages/s)."""


class LogWorkload:
    """Producers writing unique values, then one reader reading everything back."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        producers: int,
        history: LogHistory,
        security: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = dict(security or {})
        """The clients' security keywords (:attr:`LocalCluster.client_security`)."""
        self.topic = topic
        self.partitions = partitions
        self.producers = producers
        self.history = history
        history.topic = topic
        self.errors = 0

    async def create(self, segment_bytes: int) -> None:
        async with Admin(
            self.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS * 2, **self.security
        ) as admin:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topic(
                    self.topic,
                    self.partitions,
                    3,
                    {
                        "min.insync.replicas": "2",
                        "segment.bytes": str(segment_bytes),
                        "max.message.bytes": str(segment_bytes),
                    },
                )

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(*(self._produce(p, stop) for p in range(self.producers)))

    async def _produce(self, producer_id: int, stop: asyncio.Event) -> None:
        producer = Producer(
            self.bootstrap,
            client_id=f"chaos-producer-{producer_id}",
            acks="all",
            enable_idempotence=True,
            request_timeout_ms=CLIENT_TIMEOUT_MS,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            max_block_ms=CLIENT_TIMEOUT_MS,
            **self.security,
        )
        await producer.start()
        pending: set[asyncio.Task[None]] = set()
        seq = 0
        try:
            while not stop.is_set():
                if len(pending) >= MAX_IN_FLIGHT:
                    await asyncio.wait(pending, timeout=1, return_when=asyncio.FIRST_COMPLETED)
                    continue
                for _ in range(SEND_BATCH):
                    value = f"{producer_id}-{seq:09d}"
                    self.history.attempted.add(value)
                    try:
                        future = await producer.send(
                            self.topic, value.encode(), partition=seq % self.partitions
                        )
                    except MQError:
                        self.history.failed += 1
                        self.errors += 1
                        await asyncio.sleep(ERROR_BACKOFF_S)
                        break
                    task = asyncio.ensure_future(self._record(future, value, producer_id, seq))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                    seq += 1
                await asyncio.sleep(SEND_PAUSE_S)
            if pending:
                await asyncio.wait(pending, timeout=DELIVERY_TIMEOUT_MS / 1000 + 5)
        finally:
            for task in pending:
                task.cancel()
            with contextlib.suppress(MQError, OSError, asyncio.TimeoutError):
                await asyncio.wait_for(producer.stop(), DELIVERY_TIMEOUT_MS / 1000)

    async def _record(self, future: RecordFuture, value: str, producer_id: int, seq: int) -> None:
        try:
            metadata = await future
        except MQError:
            self.history.failed += 1
            return
        self.history.acked.append(
            Acked(value, producer_id, seq, metadata.partition, metadata.offset)
        )

    async def read_back(self) -> bool:
        """Read every partition from its start to its end offset; False if the bound ran
        out first (what was read is kept: missing records show as lost)."""
        deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
        parts = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        consumer = Consumer(
            bootstrap=self.bootstrap,
            client_id="chaos-reader",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            request_timeout_ms=CLIENT_TIMEOUT_MS,
            **self.security,
        )
        await consumer.start()
        try:
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            ends = await consumer.end_offsets(parts)
            self.history.end_offsets = {tp.partition: end for tp, end in ends.items()}
            done: set[TopicPartition] = {tp for tp in parts if ends[tp] == 0}
            while len(done) < len(parts) and time.monotonic() < deadline:
                try:
                    batches = await consumer.getmany(timeout_ms=500)
                except MQError:
                    await asyncio.sleep(ERROR_BACKOFF_S)
                    continue
                for tp, records in batches.items():
                    for record in records:
                        if record.offset < ends[tp] and record.value is not None:
                            self.history.read.append(
                                Read(
                                    record.value.decode(errors="replace"),
                                    tp.partition,
                                    record.offset,
                                )
                            )
                for tp in parts:
                    if tp not in done and await consumer.position(tp) >= ends[tp]:
                        done.add(tp)
            return len(done) == len(parts)
        finally:
            await consumer.stop()


class QueueWorkload:
    """A sender and consumers on one queue."""

    def __init__(
        self,
        bootstrap: str,
        queue: str,
        partitions: int,
        consumers: int,
        visibility_s: float,
        history: QueueHistory,
        rng: random.Random,
        security: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = dict(security or {})
        self.queue = queue
        self.partitions = partitions
        self.consumers = consumers
        self.history = history
        history.queue = queue
        history.visibility_s = visibility_s
        self.rng = rng
        self.errors = 0
        self.acked_bodies: set[str] = set()
        """Bodies with an ack attempt (an ack that reports an error may have settled)."""

    def _client(self, name: str) -> QueueClient:
        return QueueClient(
            self.bootstrap, client_id=name, request_timeout_ms=CLIENT_TIMEOUT_MS, **self.security
        )

    async def create(self) -> None:
        async with QueueClient(
            self.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS * 2, **self.security
        ) as q:
            with contextlib.suppress(TopicAlreadyExistsError):
                await q.create_queue(
                    self.queue,
                    self.partitions,
                    visibility_timeout=self.history.visibility_s,
                    max_deliveries=1_000,
                    replication_factor=3,
                )

    async def run(self, stop: asyncio.Event) -> None:
        """Send until ``stop``; consume until ``stop`` too."""
        clients = [
            QueueClient(
                self.bootstrap,
                client_id=f"chaos-q{n}",
                request_timeout_ms=CLIENT_TIMEOUT_MS,
                **self.security,
            )
            for n in range(self.consumers)
        ]
        for client in clients:
            await client.start()
        try:
            await asyncio.gather(
                self._send(stop),
                *(self._consume(n, c, stop, None) for n, c in enumerate(clients)),
            )
        finally:
            for client in clients:
                with contextlib.suppress(MQError, OSError):
                    await client.close()

    async def drain(self, timeout_s: float) -> bool:
        """Receive and ack until every message sent had an ack attempt; False if
        ``timeout_s`` ran out first."""
        stop = asyncio.Event()
        deadline = time.monotonic() + timeout_s
        clients = [
            QueueClient(
                self.bootstrap,
                client_id=f"chaos-drain{n}",
                request_timeout_ms=CLIENT_TIMEOUT_MS,
                **self.security,
            )
            for n in range(self.consumers)
        ]
        for client in clients:
            await client.start()
        try:
            await asyncio.gather(
                *(
                    self._consume(self.consumers + n, c, stop, deadline)
                    for n, c in enumerate(clients)
                )
            )
        finally:
            for client in clients:
                with contextlib.suppress(MQError, OSError):
                    await client.close()
        return set(self.history.sent) <= self.acked_bodies

    async def _send(self, stop: asyncio.Event) -> None:
        async with QueueClient(
            self.bootstrap,
            client_id="chaos-sender",
            request_timeout_ms=CLIENT_TIMEOUT_MS,
            **self.security,
        ) as q:
            seq = 0
            while not stop.is_set():
                bodies = [f"q-{seq + i:09d}" for i in range(SEND_CONCURRENCY)]
                seq += SEND_CONCURRENCY
                results = await asyncio.gather(
                    *(q.send(self.queue, body.encode()) for body in bodies),
                    return_exceptions=True,
                )
                for body, result in zip(bodies, results, strict=True):
                    if isinstance(result, BaseException):
                        if not isinstance(result, MQError | OSError):
                            raise result
                        self.history.send_failed += 1
                    else:
                        self.history.sent.append(body)
                if any(isinstance(r, BaseException) for r in results):
                    await asyncio.sleep(ERROR_BACKOFF_S)
                await asyncio.sleep(QUEUE_SEND_PAUSE_S)

    def _finished(self, stop: asyncio.Event, deadline: float | None) -> bool:
        if deadline is None:
            return stop.is_set()
        if time.monotonic() >= deadline:
            return True
        return set(self.history.sent) <= self.acked_bodies

    async def _consume(
        self, consumer: int, q: QueueClient, stop: asyncio.Event, deadline: float | None
    ) -> None:
        while not self._finished(stop, deadline):
            sent_at = time.time()
            try:
                messages = await q.receive(self.queue, RECEIVE_MAX, wait=RECEIVE_WAIT_S)
            except (MQError, OSError):
                self.errors += 1
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            got_at = time.time()
            to_ack: list[QueueMessage] = []
            for message in messages:
                body = (message.body or b"").decode(errors="replace")
                self.history.deliveries.append(
                    Delivery(
                        body=body,
                        partition=message.partition,
                        offset=message.offset,
                        delivery_count=message.delivery_count,
                        receipt=message.receipt,
                        consumer=consumer,
                        sent_at=sent_at,
                        got_at=got_at,
                        lease_deadline=message.lease_deadline_ms / 1000,
                    )
                )
                if deadline is not None or self.rng.random() >= UNACKED_FRACTION:
                    to_ack.append(message)
            if to_ack:
                await self._ack(q, to_ack)

    async def _ack(self, q: QueueClient, messages: list[QueueMessage]) -> None:
        started = time.time()
        error = ""
        try:
            await q.ack(*messages)
        except (MQError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.errors += 1
        done = time.time()
        for message in messages:
            self.history.acks.append(AckAttempt(message.receipt, started, done, not error, error))
            self.acked_bodies.add((message.body or b"").decode(errors="replace"))

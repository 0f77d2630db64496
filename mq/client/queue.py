"""Queues (SQS semantics on mq's log): send, receive with leases, ack / nack / extend / reject.

::

    async with mq.QueueClient(bootstrap="127.0.0.1:9292") as q:
        await q.create_queue("jobs", partitions=4, visibility_timeout=30,
                             max_deliveries=5, dead_letter_queue="jobs-dlq")
        await q.send("jobs", b"body", delay=0, dedup_id=None)
        for m in await q.receive("jobs", max_messages=10, wait=20):
            await q.ack(m)      # or q.nack(m, delay=5), q.extend(m, 60), q.reject(m)

A queue is a topic with ``queue.*`` configs, read by the *share group* of the
same name (``group=`` reads any topic with another share group). Each message
goes to one consumer at a time and stays invisible to the others while its
lease (the visibility timeout) lasts; one not acked in time is delivered
again, and after ``max_deliveries`` it goes to the dead-letter queue.

A receive long-polls every broker leading a partition of the queue at once;
messages that arrive after the call returned (from a slower broker) are kept
for the next call, and released when the client closes. Times are in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Unpack

from mq.client import queue_admin
from mq.client.admin import Admin
from mq.client.client import Client
from mq.client.futures import RecordFuture
from mq.client.partitioner import partition_for_key
from mq.client.producer import Producer
from mq.client.queue_messages import (
    QueueAttributes,
    QueueMessage,
    Receipt,
    Settleable,
    encode_filter,
    encode_headers,
    frozen_filter,
    messages_of,
    ms_of,
)
from mq.client.queue_poll import Poll, take
from mq.client.security import SecurityOptions, security_from
from mq.client.types import RecordMetadata, TopicPartition
from mq.errors import (
    InvalidReceiptError,
    MQError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from mq.queues import headers as qh
from mq.wire.apis_queues import (
    ACK,
    EXTEND,
    MAX_WAIT_MS,
    QUEUE_ACK,
    QUEUE_RECEIVE,
    REJECT,
    RELEASE,
)


class _Retry(Exception):
    """Receipts of partitions whose leader could not settle them now (retriable)."""

    def __init__(self, receipts: dict[int, list[Receipt]], error: MQError) -> None:
        super().__init__(error.message)
        self.receipts = receipts
        self.error = error


class QueueClient:
    def __init__(
        self,
        bootstrap: str = "127.0.0.1:9292",
        *,
        client_id: str = "mq-queue",
        request_timeout_ms: int = 30_000,
        **security: Unpack[SecurityOptions],
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security
        """The security keywords, for the admin client and producer made on demand."""
        self._client_id = client_id
        self._consumer_id = f"{client_id}-{uuid.uuid4().hex[:12]}"
        self._client = Client(
            bootstrap,
            client_id=client_id,
            request_timeout_s=request_timeout_ms / 1000,
            security=security_from(security),
        )
        self._admin: Admin | None = None
        self._producer: Producer | None = None
        self._polls: dict[tuple[Any, ...], Poll] = {}
        self._starting: asyncio.Lock | None = None

    async def start(self) -> None:
        await self._client.start()

    async def close(self) -> None:
        kept: list[QueueMessage] = []
        for poll in self._polls.values():
            for task in poll.inflight.values():
                task.cancel()
            kept.extend(poll.buffer)
        if kept:
            with contextlib.suppress(MQError, OSError):
                await self._settle(kept, RELEASE, 0, "the client closed")
        if self._producer is not None:
            await self._producer.stop()
        if self._admin is not None:
            await self._admin.stop()
        await self._client.close()

    async def __aenter__(self) -> QueueClient:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _admin_client(self) -> Admin:
        if self._admin is None:
            admin = Admin(self._bootstrap, client_id=self._client_id, **self._security)
            await admin.start()
            self._admin = admin
        return self._admin

    async def _producer_client(self) -> Producer:
        if self._producer is None:
            self._starting = self._starting or asyncio.Lock()
            async with self._starting:
                if self._producer is None:
                    producer = Producer(
                        self._bootstrap,
                        client_id=self._client_id,
                        acks="all",
                        enable_idempotence=True,
                        linger_ms=1,
                        **self._security,
                    )
                    await producer.start()
                    self._producer = producer
        return self._producer

    # -- queues ---------------------------------------------------------------------------

    async def create_queue(
        self,
        name: str,
        partitions: int = 1,
        *,
        visibility_timeout: float = 30,
        max_deliveries: int = 10,
        dead_letter_queue: str | None = None,
        delay: float = 0,
        fifo: bool = False,
        replication_factor: int = -1,
        exist_ok: bool = False,
        receive_rate: int = 0,
        max_in_flight: int = 0,
    ) -> bool:
        """Create the queue (and its dead-letter queue, if named and missing).

        Returns True if the queue was created. With ``exist_ok`` a topic of that name
        that already exists is no error (False is returned): as Kafka's
        ``--if-not-exists``, its settings are neither compared nor changed.
        ``receive_rate`` (messages/s) and ``max_in_flight`` (leased messages) limit
        each share group on each partition (0: no limit; not given to the dead-letter
        queue).
        """
        settings = queue_admin.QueueSettings(
            visibility_timeout,
            max_deliveries,
            dead_letter_queue,
            delay,
            fifo,
            receive_rate,
            max_in_flight,
        )
        admin = await self._admin_client()
        return await queue_admin.create_queue(
            admin, name, partitions, settings, replication_factor, exist_ok=exist_ok
        )

    async def delete_queue(self, name: str) -> None:
        await (await self._admin_client()).delete_topic(name)

    async def list_queues(self) -> list[str]:
        return await queue_admin.list_queues(await self._admin_client())

    async def purge_queue(self, name: str) -> None:
        """Delete every message of the queue (those in flight too)."""
        admin = await self._admin_client()
        partitions = await admin.topic_partitions(name)
        await admin.delete_records({tp: -1 for tp in partitions})

    async def describe_queue(self, name: str, *, group: str | None = None) -> QueueAttributes:
        admin = await self._admin_client()
        tps = await self._partitions(name)
        return await queue_admin.describe_queue(self._client, admin, name, group or name, tps)

    # -- sending --------------------------------------------------------------------------

    async def send(
        self,
        queue: str,
        body: bytes | None,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes | str] | Sequence[tuple[str, bytes | None]] | None = None,
        delay: float | None = None,
        dedup_id: str | None = None,
    ) -> RecordMetadata:
        """Send one message; returns once it is acknowledged (acks=all, idempotent).

        ``delay``: invisible for that many seconds (at most 15 minutes; None: the queue's
        default delay, which 0 overrides). ``dedup_id``:
        a message with an id sent in the last 5 minutes is accepted and dropped; a
        message without a key goes to the partition its dedup id hashes to, so its
        duplicates meet it there.
        """
        future = await self.send_nowait(
            queue, body, key=key, headers=headers, delay=delay, dedup_id=dedup_id
        )
        return await future

    async def send_nowait(
        self,
        queue: str,
        body: bytes | None,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes | str] | Sequence[tuple[str, bytes | None]] | None = None,
        delay: float | None = None,
        dedup_id: str | None = None,
    ) -> RecordFuture:
        """:meth:`send` that returns the future of the acknowledgement (to send many)."""
        await self._partitions(queue)  # a missing queue is an error, not an auto-created topic
        producer = await self._producer_client()
        items = encode_headers(headers)
        if delay is not None:
            items.append((qh.DELAY_MS, str(ms_of(delay)).encode()))
        partition = None
        if dedup_id is not None:
            items.append((qh.DEDUP_ID, dedup_id.encode()))
            if key is None:
                count = len(await producer.partitions_for(queue))
                partition = partition_for_key(dedup_id.encode(), count)
        return await producer.send(queue, body, key, items, partition)

    async def flush(self) -> None:
        if self._producer is not None:
            await self._producer.flush()

    # -- receiving ------------------------------------------------------------------------

    async def receive(
        self,
        queue: str,
        max_messages: int = 10,
        wait: float = 20,
        visibility_timeout: float | None = None,
        *,
        filter: Mapping[str, str | bytes | Iterable[str | bytes]] | None = None,
        group: str | None = None,
    ) -> list[QueueMessage]:
        """Up to ``max_messages`` messages, leased to this client; waits up to ``wait``
        seconds (at most 20) for the first. ``filter``: only messages whose headers
        have these values (a name with several values: any of them)."""
        group = group or queue
        wanted = encode_filter(filter)
        lease = None if visibility_timeout is None else ms_of(visibility_timeout)
        key = (queue, group, frozen_filter(wanted), lease)
        poll = self._polls.setdefault(key, Poll())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, min(wait, MAX_WAIT_MS / 1000))
        asked = False
        kept = len(poll.buffer)  # from earlier calls: the lease margin applies to these only
        while True:
            taken = take(poll, max_messages, kept)
            if taken:
                return taken
            kept = 0
            if poll.error is not None:
                error, poll.error = poll.error, None
                raise error
            remaining = deadline - loop.time()
            if asked and remaining <= 0:
                return []
            mine = await self._start_polls(
                poll, queue, group, wanted, lease, max_messages, remaining
            )
            asked = True
            pending = list(poll.inflight.values())
            if not pending:
                if remaining <= 0:
                    return []
                await asyncio.sleep(min(remaining, self._client.retry_backoff_s))
                continue
            # Polls started now end by themselves (the broker's long poll is bounded by
            # what is left of ``wait``); ones left from an earlier call may run longer.
            await asyncio.wait(
                pending,
                timeout=None if mine else max(remaining, 0.0),
                return_when=asyncio.FIRST_COMPLETED,
            )

    async def _start_polls(
        self,
        poll: Poll,
        queue: str,
        group: str,
        wanted: dict[str, list[bytes]] | None,
        lease: int | None,
        max_messages: int,
        remaining_s: float,
    ) -> list[asyncio.Task[None]]:
        """A receive to each leader that has none in flight; returns those started."""
        started: list[asyncio.Task[None]] = []
        tps = await self._partitions(queue)
        for node, owned in self._client.metadata.partitions_by_leader(tps).items():
            if node is None:
                self._client.request_metadata_update()
                continue
            if node in poll.inflight:
                continue
            body = {
                "group": group,
                "consumer_id": self._consumer_id,
                "topics": [{"name": queue, "partitions": [tp.partition for tp in owned]}],
                "max_messages": max_messages,
                "max_wait_ms": max(0, min(MAX_WAIT_MS, int(remaining_s * 1000))),
                "visibility_timeout_ms": lease,
                "filter": wanted,
            }
            task = asyncio.get_running_loop().create_task(self._poll_once(poll, node, body))
            poll.inflight[node] = task
            task.add_done_callback(lambda _, n=node: poll.inflight.pop(n, None))  # type: ignore[misc]
            started.append(task)
        return started

    async def _poll_once(self, poll: Poll, node: int, body: dict[str, Any]) -> None:
        timeout = body["max_wait_ms"] / 1000 + self._client.request_timeout_s
        try:
            response = await self._client.call(node, QUEUE_RECEIVE, body, timeout_s=timeout)
        except MQError as exc:
            if exc.retriable:
                self._client.request_metadata_update()
                await asyncio.sleep(self._client.retry_backoff_s)
            else:
                poll.error = exc
            return
        for topic in response["topics"]:
            for part in topic["partitions"]:
                if part["error"]:
                    error = error_for_code(part["error"])(part["message"])
                    if error.retriable:
                        self._client.request_metadata_update()
                    else:
                        poll.error = error
                    continue
                poll.buffer.extend(messages_of(topic["name"], body["group"], part))

    async def _partitions(self, queue: str) -> list[TopicPartition]:
        client = self._client
        if not client.metadata.has_topic(queue):
            client.add_topics([queue])
            await client.refresh_metadata()
            if client.metadata.topic_errors.get(queue) == UnknownTopicOrPartitionError.code:
                raise UnknownTopicOrPartitionError(f"queue {queue!r} does not exist")
            await client.wait_for_topics([queue], client.request_timeout_s)
        partitions = client.metadata.partitions_for(queue)
        if not partitions:
            raise UnknownTopicOrPartitionError(f"queue {queue!r} does not exist")
        return [TopicPartition(queue, p) for p in partitions]

    # -- settling -------------------------------------------------------------------------

    async def ack(self, *messages: Settleable) -> None:
        """Done with these messages: they are deleted from the queue (for this group)."""
        await self._settle_or_raise(messages, ACK, 0, None)

    async def nack(self, *messages: Settleable, delay: float = 0, error: str | None = None) -> None:
        """Give messages back: visible again after ``delay`` seconds (or dead-lettered
        if they reached max_deliveries)."""
        await self._settle_or_raise(messages, RELEASE, ms_of(delay), error)

    async def reject(self, *messages: Settleable, error: str | None = None) -> None:
        """The messages cannot be processed: to the dead-letter queue now."""
        await self._settle_or_raise(messages, REJECT, 0, error)

    async def extend(self, message: Settleable, visibility_timeout: float) -> None:
        """The lease now ends ``visibility_timeout`` seconds from now (0 releases it)."""
        await self._settle_or_raise([message], EXTEND, ms_of(visibility_timeout), None)

    async def _settle_or_raise(
        self, messages: Iterable[Settleable], action: int, ms: int, error: str | None
    ) -> None:
        failed = await self._settle(messages, action, ms, error)
        never = [r for r, unknown in failed if unknown]
        stale = [r for r, unknown in failed if not unknown]
        problems = []
        if never:
            names = ", ".join(str(r) for r in never[:5])
            problems.append(
                f"{len(never)} receipt(s) name no delivery ({names}): nothing was delivered "
                "at that partition, offset and delivery count (use a receipt that "
                "receive returned)"
            )
        if stale:
            names = ", ".join(str(r) for r in stale[:5])
            problems.append(
                f"{len(stale)} receipt(s) no longer hold a lease ({names}): "
                "the visibility timeout passed, or the message was already settled"
            )
        if problems:
            raise InvalidReceiptError("; ".join(problems))

    async def _settle(
        self, messages: Iterable[Settleable], action: int, ms: int, error: str | None
    ) -> list[tuple[Receipt, bool]]:
        """Settle receipts; returns those refused, each with whether it named a delivery
        that never happened (else its lease ended, or it was settled already).

        A partition whose leader moved (or is being elected) is retried against
        the new leader until the request timeout: its receipts were not applied.
        """
        pending: dict[tuple[str, str], dict[int, list[Receipt]]] = {}
        for item in messages:
            receipt = item.handle if isinstance(item, QueueMessage) else item
            per = pending.setdefault((receipt.queue, receipt.group), {})
            per.setdefault(receipt.partition, []).append(receipt)
        failed: list[tuple[Receipt, bool]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._client.request_timeout_s
        while True:
            retry: dict[tuple[str, str], dict[int, list[Receipt]]] = {}
            last: MQError | None = None
            for (queue, group), per_partition in pending.items():
                try:
                    await self._settle_queue(queue, group, per_partition, action, ms, error, failed)
                except _Retry as exc:
                    retry[(queue, group)] = exc.receipts
                    last = exc.error
            if not retry:
                return failed
            if loop.time() >= deadline:
                assert last is not None
                raise last
            self._client.request_metadata_update()
            await asyncio.sleep(self._client.retry_backoff_s)
            await self._client.refresh_metadata()
            pending = retry

    async def _settle_queue(
        self,
        queue: str,
        group: str,
        per_partition: dict[int, list[Receipt]],
        action: int,
        ms: int,
        error: str | None,
        failed: list[tuple[Receipt, bool]],
    ) -> None:
        known = {tp.partition for tp in await self._partitions(queue)}
        unknown = [r for p, receipts in per_partition.items() if p not in known for r in receipts]
        if unknown:
            raise InvalidReceiptError(
                f"receipt {unknown[0]} names no delivery: {queue} has no partition "
                f"{unknown[0].partition}"
            )
        tps = [TopicPartition(queue, p) for p in per_partition]
        retry: dict[int, list[Receipt]] = {}
        last: MQError | None = None
        for node, owned in self._client.metadata.partitions_by_leader(tps).items():
            if node is None:
                last = NotLeaderOrFollowerError(f"{queue}: a partition has no leader")
                retry.update({tp.partition: per_partition[tp.partition] for tp in owned})
                continue
            settlements = [
                {
                    "partition": tp.partition,
                    "action": action,
                    "offsets": [r.offset for r in per_partition[tp.partition]],
                    "counts": [r.deliveries for r in per_partition[tp.partition]],
                    "ms": ms,
                    "error": error,
                }
                for tp in owned
            ]
            body = {"group": group, "topics": [{"name": queue, "settlements": settlements}]}
            try:
                response = await self._client.call(node, QUEUE_ACK, body)
            except MQError as exc:
                if not exc.retriable:
                    raise
                last = exc
                retry.update({tp.partition: per_partition[tp.partition] for tp in owned})
                continue
            for topic in response["topics"]:
                for part in topic["settlements"]:
                    receipts = per_partition[part["partition"]]
                    if part["error"]:
                        refused = error_for_code(part["error"])(part["message"])
                        if not refused.retriable:
                            raise refused
                        last = refused
                        retry[part["partition"]] = receipts
                        continue
                    stale, never = set(part["failed"]), set(part.get("never_delivered", ()))
                    failed.extend((r, r.offset in never) for r in receipts if r.offset in stale)
        if retry:
            assert last is not None
            raise _Retry(retry, last)

    # -- redrive --------------------------------------------------------------------------

    async def redrive(self, dead_letter_queue: str, *, max_messages: int | None = None) -> int:
        """Move dead letters back to the queues they came from; returns how many moved."""
        moved = 0
        while max_messages is None or moved < max_messages:
            want = 100 if max_messages is None else min(100, max_messages - moved)
            batch = await self.receive(dead_letter_queue, want, wait=0, visibility_timeout=60)
            if not batch:
                return moved
            sends = []
            for message in batch:
                source = qh.header(message.headers, qh.DLQ_TOPIC)
                if source is None:
                    await self.nack(message, error="not a dead letter (no mq.dlq.topic header)")
                    continue
                kept = [(n, v) for n, v in message.headers if n not in qh.DLQ_HEADERS]
                future = await self.send_nowait(
                    source.decode(), message.body, key=message.key, headers=kept
                )
                sends.append((message, future))
            for message, future in sends:
                await future
                await self.ack(message)
                moved += 1
        return moved

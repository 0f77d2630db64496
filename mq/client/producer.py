"""The asyncio producer: ``send()`` appends to a batch, a sender task ships batches.

Shaped like aiokafka's ``AIOKafkaProducer``::

    async with Producer(bootstrap="127.0.0.1:9292", acks="all") as producer:
        fut = await producer.send("events", b"value", key=b"k")
        meta = await fut            # RecordMetadata(topic, partition, offset, timestamp)

What one ``send()`` costs is what limits a Python producer, so it is kept to
one coroutine step that does not suspend (except to let the sender run each
time a batch fills, or to wait for buffer room): pick the partition, encode
the record into its partition's open batch (:mod:`mq.client.accumulator`),
and return a :class:`RecordFuture` — a small handle, not an
:class:`asyncio.Future`: each batch completes once, and a record's handle only
creates a real future if somebody waits on it or adds a callback. The
:class:`~mq.client.sender.Sender` task turns ready batches into one produce
request per broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from time import monotonic, time_ns
from types import TracebackType
from typing import Final, Literal, Unpack

from mq.client.accumulator import DEFAULT_BUFFER_BYTES, RecordAccumulator
from mq.client.client import Client
from mq.client.futures import RecordFuture, SentRecords
from mq.client.partitioner import DefaultPartitioner, Partitioner, StickyPartitions
from mq.client.producer_batch import ProducerBatch
from mq.client.producer_states import Resume, describe_producers
from mq.client.security import SecurityOptions, security_from
from mq.client.sender import Sender
from mq.client.types import RecordMetadata, TopicPartition
from mq.errors import (
    ClientStateError,
    InvalidProducerEpochError,
    RecordTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from mq.records.compression import CODEC_NONE, codec_by_name
from mq.records.records import Header
from mq.wire.apis_data import INIT_PRODUCER_ID

Acks = Literal["all", -1, 0, 1]
DEFAULT_MAX_REQUEST_BYTES: Final = 1024 * 1024
"""Kafka's ``max.request.size``: the most bytes of batches in one produce request."""


class Producer:
    """Publishes records to topics; see the module docstring and :meth:`send`."""

    def __init__(
        self,
        bootstrap: str = "127.0.0.1:9292",
        *,
        client_id: str = "mq-producer",
        acks: Acks = "all",
        linger_ms: float = 5,
        batch_size: int = 16_384,
        max_request_size: int = DEFAULT_MAX_REQUEST_BYTES,
        compression_type: str | None = None,
        enable_idempotence: bool = False,
        retries: int = 2**31 - 1,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        buffer_memory: int = DEFAULT_BUFFER_BYTES,
        max_block_ms: int = 60_000,
        metadata_max_age_ms: int = 300_000,
        partitioner: Partitioner | None = None,
        fixed_identity: tuple[int, int] | None = None,
        **security: Unpack[SecurityOptions],
    ) -> None:
        if fixed_identity is not None and not enable_idempotence:
            raise ValueError("fixed_identity needs enable_idempotence=True")
        self._fixed_identity = fixed_identity
        ack_level = -1 if acks == "all" else acks
        if ack_level not in (-1, 0, 1):
            raise ValueError(f"acks must be 'all', -1, 0 or 1, not {acks!r}")
        if enable_idempotence and ack_level != -1:
            raise ValueError("enable_idempotence requires acks='all'")
        if not 0 < batch_size <= max_request_size:
            raise ValueError("batch_size must be positive and at most max_request_size")
        self._acks = ack_level
        self._idempotent = enable_idempotence
        self._max_request_size = max_request_size
        self._max_block_s = max_block_ms / 1000
        self._client = Client(
            bootstrap,
            client_id=client_id,
            request_timeout_s=request_timeout_ms / 1000,
            metadata_max_age_s=metadata_max_age_ms / 1000,
            retry_backoff_s=retry_backoff_ms / 1000,
            retry_backoff_max_s=retry_backoff_max_ms / 1000,
            allow_auto_topic_creation=True,
            security=security_from(security),
        )
        codec = CODEC_NONE if compression_type is None else codec_by_name(compression_type)
        self._acc = RecordAccumulator(
            batch_size=batch_size,
            linger_s=linger_ms / 1000,
            codec=codec,
            buffer_bytes=buffer_memory,
            delivery_timeout_s=delivery_timeout_ms / 1000,
            idempotent=enable_idempotence,
            on_new_batch=self._wake_sender,
        )
        self._sender = Sender(
            self._client,
            self._acc,
            acks=ack_level,
            request_timeout_s=request_timeout_ms / 1000,
            retries=retries,
            retry_backoff_s=retry_backoff_ms / 1000,
            retry_backoff_max_s=retry_backoff_max_ms / 1000,
            max_request_bytes=max_request_size,
        )
        self._partitioner = partitioner or DefaultPartitioner()
        self._sticky: StickyPartitions[ProducerBatch] | None = (
            StickyPartitions() if partitioner is None else None
        )
        self._partitions: dict[str, tuple[list[int], list[int]]] = {}
        """topic -> (every partition, those with a leader), cleared by each metadata update."""
        self._client.add_metadata_listener(self._partitions.clear)
        self._sticky_batches: dict[str, ProducerBatch] = (
            {} if self._sticky is None else self._sticky.batches
        )
        self._full_seen = 0
        """The accumulator's ``closed_full`` when send() last yielded for a full batch."""
        self._started = False
        self._closed = False
        self._running = False
        """Started and not stopped: the one flag send() checks."""

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, fetch metadata, get a producer id if idempotent, start the sender."""
        if self._started:
            return
        await self._client.start()
        try:
            if self._fixed_identity is not None:
                self._acc.set_producer_id(*self._fixed_identity)
                self._sender.fixed = True
            elif self._idempotent:
                response = await self._client.call_any(
                    INIT_PRODUCER_ID,
                    {"transactional_id": None, "producer_id": -1, "producer_epoch": -1},
                )
                self._acc.set_producer_id(response["producer_id"], response["producer_epoch"])
        except BaseException:
            await self._client.close()
            raise
        self._sender.start()
        self._started = self._running = True

    async def stop(self) -> None:
        """Send everything buffered (waiting up to each batch's delivery timeout), then close."""
        if self._closed or not self._started:
            self._closed = True
            return
        try:
            await self.flush()
        finally:
            self._closed = True
            self._running = False
            await self._sender.stop()
            self._acc.abort_all()
            for batch in list(self._acc.incomplete):
                batch.fail(
                    ClientStateError("the producer stopped before the batch was acknowledged")
                )
                self._acc.release(batch)
            await self._client.close()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def producer_id(self) -> int:
        """The idempotent producer's id (-1 when idempotence is off)."""
        return self._acc.producer_id

    async def resume_sequences(self, topic: str) -> dict[int, int]:
        """With a ``fixed_identity`` (id, epoch): per partition of ``topic``, how many
        records this id has written there in this epoch (its next sequence number); the
        producer continues there. Call it before sending anything to ``topic``.

        A partition whose leader knows a later epoch of this id raises
        :class:`~mq.errors.InvalidProducerEpochError` (this attempt is fenced).
        """
        return {p: r.written for p, r in (await self.resume(topic)).items()}

    async def resume(self, topic: str) -> dict[int, Resume]:
        """:meth:`resume_sequences`, with where the epoch's first batch is in each partition.

        What makes a task that Spark runs again write each record once
        (:mod:`spark_connector.exactly_once`): it reads back the records of its
        (id, epoch) from ``start_offset`` (they are ``written`` records, each batch
        marked with the id and epoch) and writes only its rows that are not among them.
        """
        if self._fixed_identity is None:
            raise ClientStateError("resume_sequences needs a producer with a fixed_identity")
        pid, epoch = self._fixed_identity
        await self._client.wait_for_topics([topic], self._client.request_timeout_s)
        tps = [TopicPartition(topic, p) for p in self._client.metadata.partitions_for(topic) or ()]
        states = await describe_producers(
            self._client, tps, [pid], timeout_s=self._client.request_timeout_s
        )
        out: dict[int, Resume] = {}
        for tp, producers in states.items():
            state = next((s for s in producers if s["producer_id"] == pid), None)
            if state is None or state["producer_epoch"] < epoch:
                out[tp.partition] = Resume(0, -1)
            elif state["producer_epoch"] > epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is fenced in {tp.topic}-{tp.partition}: "
                    f"epoch {state['producer_epoch']} has written there since"
                )
            else:
                out[tp.partition] = Resume(
                    state["last_sequence"] + 1, state.get("epoch_start_offset", -1)
                )
        self._acc.start_sequences({TopicPartition(topic, p): r.written for p, r in out.items()})
        return out

    # -- sending --------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Append a record to its partition's batch; returns a future of its metadata.

        Returns once the record is encoded in a batch (the broker has not seen
        it yet): await the result for the acknowledgement. Waits only for the
        first metadata of a new topic, or for buffer room when ``buffer_memory``
        is full (both bounded by ``max_block_ms``).
        """
        if not self._running:
            raise ClientStateError("the producer is not running (call start() first)")
        if timestamp_ms is None:
            timestamp_ms = time_ns() // 1_000_000
        hdrs = headers if headers is not None else ()
        if key is None and partition is None:
            # Fast path: the open batch keyless records of this topic stick to.
            batch = self._sticky_batches.get(topic)
            if batch is not None:
                builder = batch.builder
                if builder is not None:
                    if builder.append(
                        None, value, hdrs, timestamp_ms, max_batch_bytes=batch.max_bytes
                    ):
                        index = batch.count
                        batch.count = index + 1
                        return RecordFuture(batch, index, timestamp_ms)
                    self._acc.close_full(batch)
        batch, index = await self._place(topic, value, key, hdrs, partition, timestamp_ms)
        return RecordFuture(batch, index, timestamp_ms)

    async def _place(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        hdrs: Sequence[Header],
        partition: int | None,
        timestamp_ms: int,
    ) -> tuple[ProducerBatch, int]:
        """Every send but a keyless one that fits the open sticky batch: (batch, index)."""
        parts = self._partitions.get(topic)
        if parts is None:
            parts = await self._partitions_of(topic)
        sticky = None
        if partition is None:
            if key is None and self._sticky is not None:
                sticky = self._sticky
                partition = sticky.switch(topic, parts[0], parts[1])
            else:
                partition = self._partitioner(key, parts[0], parts[1])
        elif partition not in parts[0]:
            raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition}")
        acc = self._acc
        tp = (topic, partition)
        placed = acc.append(tp, key, value, hdrs, timestamp_ms, monotonic())
        while placed is None:
            await self._wait_for_room()
            placed = acc.append(tp, key, value, hdrs, timestamp_ms, monotonic())
        batch, index = placed
        if sticky is not None:
            sticky.stick(topic, partition, batch)
        if index == 0:
            if batch.size > self._max_request_size:
                acc.discard_last(tp)
                raise RecordTooLargeError(
                    f"the record is {batch.size} bytes as a batch, "
                    f"more than max_request_size ({self._max_request_size})"
                )
            if acc.closed_full != self._full_seen:
                # A batch was opened because another is full: let the sender take that one
                # (a tight send loop never yields otherwise). A batch opened after the
                # sender drained the last one does not yield: the records an application
                # sends before it yields go in one request, however short the linger.
                self._full_seen = acc.closed_full
                await asyncio.sleep(0)
        return batch, index

    async def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> SentRecords:
        """:meth:`send` for many keyless, headerless records at once: a batch per pass.

        The records go in the order of ``values`` (to ``partition``, or with
        the sticky partitioner a batch's worth to each partition, as keyless
        :meth:`send` calls would), all with one timestamp. Each batch is filled
        in one pass (:func:`mq.records.bulk.encode_values`) instead of one
        call per record, several times cheaper. Await the result for every
        record's :class:`RecordMetadata`, in order. A record too large for a
        batch raises as in :meth:`send`; the records before it are sent.
        """
        if not self._running:
            raise ClientStateError("the producer is not running (call start() first)")
        ts = time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        spans: list[tuple[ProducerBatch, int, int]] = []
        at, total = 0, len(values)
        while at < total:
            batch = self._sticky_batches.get(topic) if partition is None else None
            first = added = 0
            if batch is not None:  # the open sticky batch first, as send() does
                first = batch.count
                added = batch.try_append_values(values, at, ts)
                if not added:
                    self._acc.close_full(batch)
            if not added:  # a new batch (or the partition's open one), as send() opens it
                batch, first = await self._place(topic, values[at], None, (), partition, ts)
                added = 1 + batch.try_append_values(values, at + 1, ts)
            assert batch is not None
            spans.append((batch, first, added))
            at += added
            if at < total:
                self._acc.close_full(batch)  # it refused the next record: full
        return SentRecords(spans, ts)

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """:meth:`send` and wait for the acknowledgement."""
        future = await self.send(topic, value, key, headers, partition, timestamp_ms)
        return await future

    async def flush(self, timeout_s: float | None = None) -> None:
        """Send every record appended so far at once (no linger) and wait for their outcome."""
        if not self._started:
            return
        pending = [batch for batch in self._acc.incomplete if not batch.done]
        if not pending:
            return
        loop = asyncio.get_running_loop()
        all_done: asyncio.Future[None] = loop.create_future()
        left = len(pending)

        def one_done(_: ProducerBatch) -> None:
            nonlocal left
            left -= 1
            if left == 0 and not all_done.done():
                all_done.set_result(None)

        self._acc.flushing += 1
        try:
            for batch in pending:
                batch.add_callback(one_done)
            self._sender.wake()
            async with asyncio.timeout(timeout_s):
                await all_done
        finally:
            self._acc.flushing -= 1

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids (waiting for its metadata if needed)."""
        return list((await self._partitions_of(topic))[0])

    # -- internals --------------------------------------------------------------------------------

    def _wake_sender(self, due: float) -> None:
        self._sender.wake_by(due)

    async def _partitions_of(self, topic: str) -> tuple[list[int], list[int]]:
        metadata = self._client.metadata
        if metadata.partitions_for(topic) is None or topic not in self._client.topics():
            await self._client.wait_for_topics([topic], self._max_block_s)
        every = metadata.partitions_for(topic)
        if not every:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partitions")
        parts = (every, metadata.available_partitions_for(topic) or every)
        self._partitions[topic] = parts
        return parts

    async def _wait_for_room(self) -> None:
        try:
            async with asyncio.timeout(self._max_block_s):
                await self._sender.wait_for_room()
        except TimeoutError:
            raise RequestTimedOutError(
                f"the producer's buffer stayed full for max_block_ms ({self._max_block_s}s)"
            ) from None

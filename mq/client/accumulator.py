"""The producer's record accumulator: per-partition batches, readiness, draining.

Pure bookkeeping (no I/O, no event loop; times are seconds passed in by the
caller), so it is tested alone; a batch is a
:class:`~mq.client.producer_batch.ProducerBatch`. The producer's ``send()`` appends each record
to its partition's open :class:`ProducerBatch`, which encodes it at once
into a :class:`~mq.records.records.BatchBuilder` — the one pass of encoding a
record ever gets. The producer's sender task asks :meth:`RecordAccumulator.ready`
which brokers have something to send, and :meth:`RecordAccumulator.drain`
hands it the batches for one produce request per broker.

A partition's batches form a queue: only the newest may be open (taking
records); the others are closed (built: compressed, header and CRC written —
the bytes every retry resends). A batch is *ready* when it is closed because it
is full, when it has lingered ``linger_s``, when its retry backoff is over, or
when the producer flushes or closes. Order per partition: the sender drains
from the front of each queue and, while a partition is *muted* (a request for
it is in flight), not at all; a batch that must be retried goes back to the
front.

Bounds: ``buffer_bytes`` caps the bytes held in unsent and in-flight batches
(Kafka's ``buffer.memory``); :meth:`RecordAccumulator.append` refuses to open
a batch past it and the producer waits for room. Idempotence: each partition
numbers its records; a batch is opened with the next sequence number of its
partition in its header (``base_sequence``), which is final because only the
newest batch of a partition is ever open.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from mq.client.producer_batch import ProducerBatch
from mq.client.types import TopicPartition
from mq.errors import ClientStateError
from mq.records.compression import CODEC_NONE
from mq.records.records import BatchBuilder, Header

DEFAULT_BUFFER_BYTES: Final = 32 * 1024 * 1024
"""Kafka's ``buffer.memory``: bytes of records a producer holds before send() waits."""

NO_PRODUCER_ID: Final = -1


class RecordAccumulator:
    """Every partition's queue of batches; see the module docstring. Not thread-safe."""

    def __init__(
        self,
        *,
        batch_size: int = 16_384,
        linger_s: float = 0.005,
        codec: int = CODEC_NONE,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        delivery_timeout_s: float = 120.0,
        idempotent: bool = False,
        on_new_batch: Callable[[float], None] | None = None,
    ) -> None:
        if batch_size < 1 or linger_s < 0 or buffer_bytes < batch_size:
            raise ValueError("batch_size >= 1, linger_s >= 0 and buffer_bytes >= batch_size")
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.codec = codec
        self.buffer_bytes = buffer_bytes
        self.delivery_timeout_s = delivery_timeout_s
        self.idempotent = idempotent
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self._on_new_batch = on_new_batch
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        """Looked up by plain ``(topic, partition)`` tuples too (equal hash and equality)."""
        self._next_sequence: dict[TopicPartition, int] = {}
        self.incomplete: set[ProducerBatch] = set()
        """Every batch not yet completed or failed, queued or in flight."""
        self.used_bytes = 0
        """Bytes reserved by incomplete batches (batch_size each while open)."""
        self._drain_start = 0
        self.sendable: list[TopicPartition] = []
        """The partitions the last :meth:`ready` found sendable, for :meth:`drain`."""
        self.flushing = 0
        """While positive, every batch is ready at once (flush or close in progress)."""
        self.closed_full = 0
        """How many batches were closed because a record did not fit (a count, never reset)."""

    # -- appending (the producer's send path) ---------------------------------------------

    def append(
        self,
        tp: tuple[str, int],
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp: int,
        now: float,
    ) -> tuple[ProducerBatch, int] | None:
        """Add a record to the partition's open batch, opening one if needed.

        Returns the batch and the record's index in it, or None when a new batch
        is needed and the buffer is full (wait for :attr:`used_bytes` to drop).
        """
        queue = self._queues.get(tp)  # type: ignore[call-overload]
        if queue:
            batch = queue[-1]
            if batch.builder is not None:
                index = batch.try_append(key, value, headers, timestamp)
                if index >= 0:
                    return batch, index
                self._close(batch)
        if self.used_bytes + self.batch_size > self.buffer_bytes and self.incomplete:
            return None
        batch = self._open(tp, now)
        return batch, batch.try_append(key, value, headers, timestamp)

    def append_if_room(
        self,
        tp: tuple[str, int],
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp: int,
    ) -> tuple[ProducerBatch, int] | None:
        """Add a record to the partition's open batch only; None (closing it) if it is full."""
        queue = self._queues.get(tp)  # type: ignore[call-overload]
        if queue:
            batch = queue[-1]
            index = batch.try_append(key, value, headers, timestamp)
            if index >= 0:
                return batch, index
            if batch.builder is not None:
                self._close(batch)
        return None

    def close_full(self, batch: ProducerBatch) -> None:
        """Close a partition's open batch that refused a record (the producer's fast path)."""
        if batch.builder is not None:
            self._close(batch)

    def discard_last(self, tp: tuple[str, int]) -> None:
        """Drop a partition's newest batch (just opened for a record found too large)."""
        batch = self._queues[tp].pop()  # type: ignore[index]
        self._release(batch)

    def _open(self, key: tuple[str, int], now: float) -> ProducerBatch:
        tp = key if type(key) is TopicPartition else TopicPartition(key[0], key[1])
        sequence = self._next_sequence.get(tp, 0) if self.idempotent else -1
        builder = BatchBuilder(
            codec=self.codec,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=sequence,
        )
        batch = ProducerBatch(
            tp,
            builder,
            created=now,
            deadline=now + self.delivery_timeout_s,
            max_bytes=self.batch_size,
            base_sequence=sequence,
        )
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        queue.append(batch)
        self.incomplete.add(batch)
        self.used_bytes += self.batch_size
        if self._on_new_batch is not None:
            self._on_new_batch(now if self.flushing else now + self.linger_s)
        return batch

    def _close(self, batch: ProducerBatch, *, wake: bool = True) -> None:
        """Close a batch: full (``wake``: the sender is told) or drained."""
        batch.close()
        if self.idempotent:
            self._next_sequence[batch.tp] = batch.base_sequence + batch.count
        if wake:
            self.closed_full += 1
            if self._on_new_batch is not None:
                self._on_new_batch(0.0)  # a full batch is ready now: wake the sender

    # -- the sender's side -----------------------------------------------------------------

    def ready(
        self,
        now: float,
        leader_of: Callable[[TopicPartition], int | None],
        muted: Callable[[TopicPartition], bool],
    ) -> tuple[set[int], float | None, set[str]]:
        """(nodes with a ready batch, seconds until the next may be ready, leaderless topics)."""
        nodes: set[int] = set()
        unknown: set[str] = set()
        wait: float | None = None
        sendable: list[TopicPartition] = []
        for tp, queue in self._queues.items():
            if not queue:
                continue
            leader = leader_of(tp)
            if leader is None:
                unknown.add(tp.topic)
                continue
            if muted(tp):
                continue
            due = self._due(queue[0], len(queue) > 1)
            if due <= now:
                nodes.add(leader)
                sendable.append(tp)
            elif wait is None or due - now < wait:
                wait = due - now
        self.sendable = sendable
        return nodes, wait, unknown

    def next_due(self, tps: Iterable[TopicPartition]) -> float:
        """When the first of these partitions' queued batches becomes sendable (inf: none)."""
        due = math.inf
        for tp in tps:
            queue = self._queues.get(tp)
            if queue:
                due = min(due, self._due(queue[0], len(queue) > 1))
        return due

    def _due(self, batch: ProducerBatch, has_next: bool) -> float:
        """When the first batch of a partition becomes sendable."""
        if batch.attempts:
            return batch.retry_at
        if batch.builder is None or has_next or self.flushing:
            return 0.0
        return batch.created + self.linger_s

    def drain(
        self,
        nodes: Iterable[int],
        now: float,
        leader_of: Callable[[TopicPartition], int | None],
        muted: Callable[[TopicPartition], bool],
        max_request_bytes: int,
        candidates: Sequence[TopicPartition] | None = None,
    ) -> dict[int, list[ProducerBatch]]:
        """Take the sendable batches of every ready partition led by ``nodes``.

        Per node at most ``max_request_bytes`` (at least one batch); per
        partition every consecutive sendable batch from the front of its queue
        (one only when idempotent: sequences are checked a batch per request),
        closed (built) on the way; ``candidates`` (the last :meth:`ready`'s
        :attr:`sendable`, when ``now`` is the same) limits the look to those
        partitions instead of all. A batch larger than ``batch_size`` (one big
        record) travels alone, so if the broker refuses it, nothing else fails
        with it. The caller mutes the returned partitions until the response.
        """
        wanted = set(nodes)
        out: dict[int, list[ProducerBatch]] = {}
        budget: dict[int, int] = {}
        queues = self._queues
        items = (
            list(queues.items())
            if candidates is None
            else [(tp, queues[tp]) for tp in candidates if tp in queues]
        )
        if len(items) > 1:  # start at a different partition each time: no starvation
            self._drain_start = start = (self._drain_start + 1) % len(items)
            items = items[start:] + items[:start]
        for tp, queue in items:
            if not queue or muted(tp):
                continue
            leader = leader_of(tp)
            if leader is None or leader not in wanted:
                continue
            left = budget.get(leader, max_request_bytes)
            taken = out.setdefault(leader, [])
            while queue and self._due(queue[0], len(queue) > 1) <= now:
                batch = queue[0]
                size = batch.size
                if taken and (size > left or size > self.batch_size):
                    break
                if batch.builder is not None:
                    self._close(batch, wake=False)
                queue.popleft()
                taken.append(batch)
                left -= size
                if size > self.batch_size or left <= 0 or self.idempotent:
                    break  # idempotent: one batch per partition per request, as the broker needs
            budget[leader] = left
        return {node: batches for node, batches in out.items() if batches}

    def reenqueue(self, batches: Sequence[ProducerBatch], retry_at: float) -> None:
        """Put batches of one partition back at the front of its queue, in their order."""
        for batch in reversed(batches):
            batch.attempts += 1
            batch.retry_at = retry_at
            self._queues.setdefault(batch.tp, deque()).appendleft(batch)

    def expired(self, now: float) -> list[ProducerBatch]:
        """Remove and return the queued batches past their delivery deadline."""
        out: list[ProducerBatch] = []
        for queue in self._queues.values():
            while queue and queue[0].deadline <= now:
                batch = queue.popleft()
                if batch.builder is not None:
                    self._close(batch, wake=False)
                out.append(batch)
        return out

    def release(self, batch: ProducerBatch) -> None:
        """Forget a completed or failed batch (frees its buffer space)."""
        self._release(batch)

    def _release(self, batch: ProducerBatch) -> None:
        if batch in self.incomplete:
            self.incomplete.discard(batch)
            self.used_bytes -= self.batch_size

    def abort_all(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (the producer is closing without flush)."""
        out = [batch for queue in self._queues.values() for batch in queue]
        for queue in self._queues.values():
            queue.clear()
        return out

    def head_was_sent(self, tp: TopicPartition) -> bool:
        """Whether the partition's first queued batch went out before (a retry)."""
        queue = self._queues.get(tp)
        return bool(queue) and queue[0].attempts > 0  # type: ignore[index]

    def any_head_was_sent(self) -> bool:
        """Whether some queued batch is a retry, whose outcome is still unknown."""
        return any(queue and queue[0].attempts > 0 for queue in self._queues.values())

    def queued(self) -> int:
        """Batches waiting in the queues (not in flight)."""
        return sum(len(queue) for queue in self._queues.values())

    def start_sequences(self, sequences: Mapping[TopicPartition, int]) -> None:
        """The first sequence number of partitions nothing was sent to yet (a producer
        resuming a fixed identity's sequences)."""
        for tp, sequence in sequences.items():
            if self._queues.get(tp) or tp in self._next_sequence:
                raise ClientStateError(f"{tp} already has batches: its sequence is set")
            if sequence:
                self._next_sequence[tp] = sequence

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        """A new producer id or epoch: sequences restart at 0 in every partition.

        Queued batches (closed first if open) are re-stamped with the new id,
        epoch and sequences in their order; batches opened later follow on.
        Call it only while no batch is in flight.
        """
        self.producer_id = producer_id
        self.producer_epoch = epoch
        self._next_sequence.clear()
        for tp, queue in self._queues.items():
            sequence = 0
            for batch in queue:
                if batch.builder is not None:
                    batch.close()
                batch.restamp(producer_id, epoch, sequence)
                sequence += batch.count
            if sequence:
                self._next_sequence[tp] = sequence

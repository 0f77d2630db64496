"""The producer's sender task: drains ready batches into produce requests, retries.

One task per producer loops: fail batches past their delivery timeout, ask
the accumulator which brokers have ready batches, and turn each broker's
drained batches into **one** produce request (several partitions, and several
batches per partition back to back). Each request is awaited by a small task
of its own, so several requests are in flight per broker — up to the
connection's bound — while a partition is *muted* from the moment its batches
are drained until their response is handled: at most one request per
partition is in flight, which keeps each partition in order even across
retries (a failed batch goes back to the front of its queue).

Retriable errors (a lost connection, NOT_LEADER_OR_FOLLOWER, a timeout …)
request a metadata refresh and retry after a doubling backoff, until
``retries`` attempts or the batch's delivery deadline; an idempotent
producer resends the very same bytes (same producer id, epoch, sequence), so
the broker writes each batch once. Other errors fail the batch's records.

Idempotence after a failure (Kafka's KIP-360): a batch that fails for good
leaves a gap in its partition's sequence, which the broker would refuse
(OUT_OF_ORDER_SEQUENCE) for every later batch. So the sender then holds
back fresh batches, lets retries of batches whose outcome is unknown finish
under the old epoch, asks for a new epoch (``init_producer_id`` with the
current id) and re-stamps every queued batch with it, sequences from 0.

Not thread-safe: runs on the producer's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Any

from mq.client.accumulator import RecordAccumulator
from mq.client.client import Client
from mq.client.producer_batch import ProducerBatch
from mq.client.types import TopicPartition
from mq.errors import (
    DuplicateSequenceError,
    MQError,
    RequestTimedOutError,
    UnknownProducerIdError,
    error_for_code,
)
from mq.wire.apis_data import INIT_PRODUCER_ID, PRODUCE, ProduceResponse

log = logging.getLogger(__name__)

IDLE_TICK_S = 1.0
"""Longest sleep while batches are queued: delivery deadlines are checked this often."""


class Sender:
    """Moves batches from the accumulator to the brokers; see the module docstring."""

    def __init__(
        self,
        client: Client,
        accumulator: RecordAccumulator,
        *,
        acks: int,
        request_timeout_s: float,
        retries: int,
        retry_backoff_s: float,
        retry_backoff_max_s: float,
        max_request_bytes: int,
    ) -> None:
        self._client = client
        self._acc = accumulator
        self._acks = acks
        self._request_timeout_s = request_timeout_s
        self._retries = retries
        self._backoff = retry_backoff_s
        self._backoff_max = retry_backoff_max_s
        self._max_request_bytes = max_request_bytes
        self._muted: set[TopicPartition] = set()
        self._requests: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._full_nodes: set[int] = set()
        """Nodes the last step had ready batches for but no room in flight."""
        self._asleep_until: float | None = None
        """While the sender sleeps, when it wakes by itself (inf: only when woken); else None."""
        self._task: asyncio.Task[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self.bump_needed = False
        """Idempotence: a new epoch is needed before fresh batches may go (see above)."""
        self.fixed = False
        """The caller fixed the producer id and epoch (``Producer(fixed_identity=...)``):
        never bump; a batch whose sequence the broker refuses fails for good."""
        client.add_metadata_listener(self.wake)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mq-sender")

    def wake(self) -> None:
        self._wake.set()

    def wake_by(self, due: float) -> None:
        """A batch becomes sendable at ``due`` (monotonic): wake unless asleep until then only.

        Each new batch calls this. Waking for every one made the sender scan
        every partition per new batch: with records spread over 1,000
        partitions, that scan cost more than the records. A running sender
        sees the batch in its next scan; a sleeping one wakes no later than
        its earliest head batch is due, which no newer batch precedes.
        """
        if self._asleep_until is not None and due < self._asleep_until:
            self._wake.set()

    async def stop(self) -> None:
        """Stop sending (callers flush first); in-flight requests are awaited, then abandoned."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._requests):
            task.cancel()
        if self._requests:
            await asyncio.wait(self._requests)

    async def wait_for_room(self) -> None:
        """Wait until a batch has been released (the accumulator's buffer is full)."""
        if self._room is None or self._room.done():
            self._room = asyncio.get_running_loop().create_future()
        await self._room

    # -- the loop -----------------------------------------------------------------------------

    def _leader_of(self, tp: TopicPartition) -> int | None:
        return self._client.metadata.leader_for(tp)

    def _has_room(self, node: int) -> bool:
        info = self._client.metadata.broker(node)
        if info is None:
            return False
        conn = self._client.pooled((info.host, info.port))
        return conn is None or conn.ready

    def _held(self, tp: TopicPartition) -> bool:
        """Muted, or (while an epoch bump waits) headed by a batch never sent."""
        if tp in self._muted:
            return True
        return self.bump_needed and not self._acc.head_was_sent(tp)

    async def _bump_epoch(self) -> None:
        """Start a new epoch (or, if the broker refuses, a new producer id); re-stamp."""
        acc = self._acc
        body = {
            "transactional_id": None,
            "producer_id": acc.producer_id,
            "producer_epoch": acc.producer_epoch,
        }
        try:
            try:
                response = await self._client.call_any(INIT_PRODUCER_ID, body)
            except MQError as exc:
                if exc.retriable:
                    raise
                body["producer_id"] = body["producer_epoch"] = -1
                response = await self._client.call_any(INIT_PRODUCER_ID, body)
        except MQError as exc:
            log.warning("cannot start a new producer epoch yet: %r", exc)
            await asyncio.sleep(self._backoff)
            return
        acc.set_producer_id(response["producer_id"], response["producer_epoch"])
        self.bump_needed = False
        log.info("producer %d: new epoch %d", acc.producer_id, acc.producer_epoch)

    async def _run(self) -> None:
        while True:
            self._wake.clear()  # a wake from here on is seen by the next step
            try:
                wait = await self._step()
            except Exception:  # a bug must not silently stop every send
                log.exception("the producer's sender failed; going on")
                wait = self._backoff
            if wait == 0:
                await asyncio.sleep(0)  # let the requests go out before looking again
                continue
            if wait is None:
                self._asleep_until = math.inf
                await self._wake.wait()
            else:
                self._asleep_until = time.monotonic() + wait
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
            self._asleep_until = None

    async def _step(self) -> float | None:
        """Expire, drain and send once; how long to sleep next (None: until woken)."""
        acc = self._acc
        muted = self._held if acc.idempotent else self._muted.__contains__
        if self.bump_needed and not self._requests and not acc.any_head_was_sent():
            await self._bump_epoch()
        now = time.monotonic()
        for batch in acc.expired(now):
            self._fail(batch, _expired(batch))
        nodes, wait, unknown = acc.ready(now, self._leader_of, muted)
        if unknown:
            self._client.request_metadata_update()
        roomy = {node for node in nodes if self._has_room(node)}
        self._full_nodes = nodes - roomy
        nodes = roomy
        if nodes:
            drained = acc.drain(
                nodes, now, self._leader_of, muted, self._max_request_bytes, acc.sendable
            )
            for node, batches in drained.items():
                self._send(node, batches)
            return 0
        if acc.queued():
            wait = IDLE_TICK_S if wait is None else min(wait, IDLE_TICK_S)
        if wait is not None and 0 < wait < acc.linger_s / 2:
            # Batches lingering in many partitions fall due one after another: waking
            # for each would scan every partition per batch. Half a linger more lets
            # them go together (linger_ms=0 never waits here).
            wait = acc.linger_s / 2
        return wait

    def _send(self, node: int, batches: list[ProducerBatch]) -> None:
        by_tp: dict[TopicPartition, list[ProducerBatch]] = {}
        for batch in batches:
            by_tp.setdefault(batch.tp, []).append(batch)
        self._muted.update(by_tp)
        task = asyncio.get_running_loop().create_task(self._produce(node, by_tp))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    def _body(self, by_tp: dict[TopicPartition, list[ProducerBatch]]) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, batches in by_tp.items():
            data = (
                batches[0].data if len(batches) == 1 else b"".join(b.data or b"" for b in batches)
            )
            topics.setdefault(tp.topic, []).append({"partition": tp.partition, "records": data})
        return {
            "transactional_id": None,
            "acks": self._acks,
            "timeout_ms": int(self._request_timeout_s * 1000),
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        }

    async def _produce(self, node: int, by_tp: dict[TopicPartition, list[ProducerBatch]]) -> None:
        try:
            try:
                future = await self._client.request(
                    node,
                    PRODUCE,
                    self._body(by_tp),
                    timeout_s=self._request_timeout_s + 5.0,
                    expect_response=self._acks != 0,
                )
                response: ProduceResponse = await future
            except MQError as exc:
                for batches in by_tp.values():
                    self._failed(batches, exc)
                return
            except Exception as exc:  # not a broker's answer: a bug, never retried
                log.exception("produce request to broker %d failed", node)
                error = MQError(f"the produce request failed in the client: {exc!r}")
                for batches in by_tp.values():
                    self._failed(batches, error)
                return
            if self._acks == 0:
                for batches in by_tp.values():
                    for batch in batches:
                        self._complete(batch, -1, -1)
                return
            self._handle(response, by_tp)
        finally:
            self._muted.difference_update(by_tp)
            self._after_response(node, by_tp)

    def _after_response(self, node: int, by_tp: dict[TopicPartition, list[ProducerBatch]]) -> None:
        """Wake for what a response unblocks: these partitions' next batches, a full node.

        Not for every response: with records spread over many partitions, a
        step per response (a scan of every partition) sent one small batch
        per request, again and again.
        """
        if self.bump_needed or node in self._full_nodes:
            self._wake.set()
        else:
            self.wake_by(self._acc.next_due(by_tp))

    def _handle(
        self, response: ProduceResponse, by_tp: dict[TopicPartition, list[ProducerBatch]]
    ) -> None:
        results = {
            (topic["name"], part["partition"]): part
            for topic in response["topics"]
            for part in topic["partitions"]
        }
        for tp, batches in by_tp.items():
            result = results.get(tp)
            if result is None:
                self._failed(batches, MQError(f"the broker's response has no result for {tp}"))
                continue
            code = result["error"]
            if code == DuplicateSequenceError.code:
                code = 0  # already written by an earlier attempt: a success, offsets unknown
                result["base_offset"] = -1
            if code:
                self._failed(batches, error_for_code(code)(result["message"]))
                continue
            base = result["base_offset"]
            append_time = result["log_append_time"]
            for batch in batches:
                self._complete(batch, base, append_time)
                if base >= 0:
                    base += batch.count

    def _failed(self, batches: list[ProducerBatch], error: MQError) -> None:
        """Retry the batches of one partition, or fail them for good."""
        now = time.monotonic()
        first = batches[0]
        if isinstance(error, UnknownProducerIdError) and self._acc.idempotent:
            if self.fixed:  # the broker forgot this fixed identity: the caller decides
                for batch in batches:
                    self._fail(batch, error)
                return
            self.bump_needed = True  # the broker forgot this producer: retry in a new epoch
        if error.retriable and first.attempts < self._retries and now < first.deadline:
            self._client.note_error(error)
            backoff = min(self._backoff * 2 ** min(first.attempts, 30), self._backoff_max)
            log.debug("retrying %s in %.3fs after %r", first.tp, backoff, error)
            for batch in batches:
                batch.last_error = error
            self._acc.reenqueue(batches, now + backoff)
            return
        for batch in batches:
            self._fail(batch, error)

    def _complete(self, batch: ProducerBatch, base_offset: int, append_time: int) -> None:
        batch.complete(base_offset, append_time)
        self._release(batch)

    def _fail(self, batch: ProducerBatch, error: MQError) -> None:
        batch.fail(error)
        self._release(batch)
        if self._acc.idempotent and not self.fixed:
            self.bump_needed = True  # its partition's sequence has a gap now

    def _release(self, batch: ProducerBatch) -> None:
        self._acc.release(batch)
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)


def _expired(batch: ProducerBatch) -> MQError:
    """The error of a batch past its delivery deadline: the last attempt's, if it failed
    (a full disk's STORAGE_ERROR says more than a timeout), else a timeout."""
    last = batch.last_error
    if last is None:
        return RequestTimedOutError(f"{batch!r} expired before it was sent")
    return type(last)(
        f"{batch!r} expired after {batch.attempts} attempts; the last failed: {last.message}"
    )

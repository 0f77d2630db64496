"""The consumer's fetcher: prefetching with long polls, raw buffers, lazy decoding.

A background task keeps every assigned partition fed: it sends **one fetch
request per broker** for all the partitions that broker leads and that need
data (position known, not paused or held, not already being fetched, less than
``max_partition_fetch_bytes`` buffered), as a long poll (``max_wait``,
``min_bytes``). Responses are kept *raw* in each partition's
:class:`~mq.client.fetch_buffer.PartitionState` and decoded lazily, one batch
at a time, as the application takes records (:meth:`Fetcher.take`).

A response to a request made before a seek is dropped (the partition's
``epoch`` moved). A *held* partition is neither fetched nor handed out, as a
paused one, but by the group rather than the application: while a rebalance
listener commits a partition being revoked, or looks at one just assigned.
A partition whose position is unknown waits for a lookup:
the group's committed offset, else the reset policy (``earliest``/``latest``
via list_offsets); OFFSET_OUT_OF_RANGE triggers the reset policy, or an error
for the application when the policy is ``none``.

Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from mq.client.client import Client
from mq.client.fetch_buffer import PartitionState, RawRecords
from mq.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from mq.client.types import ConsumerRecord, TopicPartition
from mq.errors import CorruptRecordError, MQError, OffsetOutOfRangeError, error_for_code
from mq.wire.apis_data import FETCH, FetchResponse

log = logging.getLogger(__name__)

MAX_FETCHES_PER_BROKER: Final = 4
"""Fetch requests in flight per broker, each for different partitions: a
partition that was consumed is fetched again without waiting for the long
polls of the others."""

CORRUPT_RETRY_S: Final = 30.0
"""How long a retriable CORRUPT_MESSAGE at one offset is retried before the
application gets it. A broker whose copy is damaged hands leadership to a
healthy in-sync replica within seconds (its read reports the damage, its
scrubber confirms it, the metadata refresh follows); one that has no healthy
copy answers CORRUPT_DATA, which is raised at once. Past this, retrying will
not help, and a consumer must not wait on silently."""
CORRUPT_RETRY_MAX: Final = 300
"""At most this many attempts at one damaged offset (at the default 0.1 s backoff,
about as long as :data:`CORRUPT_RETRY_S`): the bound that holds if the clock does not."""


class Fetcher:
    """Assigned partitions, their buffers, and the task that fills them."""

    def __init__(
        self,
        client: Client,
        *,
        auto_offset_reset: str = "latest",
        fetch_max_wait_s: float = 0.5,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        isolation_level: int = 0,
        request_timeout_s: float = 30.0,
        retry_backoff_s: float = 0.1,
        corrupt_retry_s: float = CORRUPT_RETRY_S,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset is 'earliest', 'latest' or 'none'")
        self._client = client
        self.auto_offset_reset = auto_offset_reset
        self._max_wait_ms = int(fetch_max_wait_s * 1000)
        self._min_bytes = fetch_min_bytes
        self._max_bytes = fetch_max_bytes
        self._partition_max = max_partition_fetch_bytes
        self.isolation_level = isolation_level
        self._timeout_s = request_timeout_s + fetch_max_wait_s
        self._backoff_s = retry_backoff_s
        self._corrupt_retry_s = corrupt_retry_s
        self._corrupt: dict[TopicPartition, tuple[int | None, float, int]] = {}
        """Partitions answering a retriable CORRUPT_MESSAGE: (offset, since, attempts)."""
        self.states: dict[TopicPartition, PartitionState] = {}
        self.held: set[TopicPartition] = set()
        """Assigned partitions neither fetched nor handed out for now (see the module docstring)."""
        self._fetches: dict[int, int] = {}
        self._wake = asyncio.Event()
        self._data = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._rotate = 0
        self._backoff_until = 0.0
        self.committed_lookup: (
            Callable[[set[TopicPartition]], Awaitable[dict[TopicPartition, int]]] | None
        ) = None
        """How to find committed offsets (set by the consumer when it has a group)."""
        client.add_metadata_listener(self.wake)  # a partition's leader may be known now

    # -- assignment and positions ------------------------------------------------------------

    def add(self, tp: TopicPartition, position: int | None, reset: str | None = None) -> None:
        """Start fetching ``tp`` from ``position``; None: look it up first.

        ``reset`` says how: "committed" (the group's committed offset, else the
        reset policy), "earliest", "latest"; default: the reset policy.
        """
        self.states[tp] = PartitionState(position, reset or self.auto_offset_reset)
        self._client.add_topics([tp.topic])
        self.wake()

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.states.pop(tp, None)
            self.held.discard(tp)
            self._corrupt.pop(tp, None)

    def hold(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching and handing out these partitions until :meth:`release` or removal."""
        self.held.update(tp for tp in tps if tp in self.states)

    def release(self, tps: Iterable[TopicPartition]) -> None:
        self.held.difference_update(tps)
        self.wake()
        self.data_ready()

    def data_ready(self) -> None:
        """Wake ``wait_for_data`` if records became available without a fetch (resume, release)."""
        if self.has_data():
            self._data.set()

    def wake_waiters(self) -> None:
        """Wake ``wait_for_data`` without data (the consumer has an error to raise)."""
        self._data.set()

    def seek(self, tp: TopicPartition, offset: int | None, reset: str | None = None) -> None:
        self.states[tp].seek(offset, reset)
        self.wake()

    def wake(self) -> None:
        self._wake.set()

    # -- the task -----------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mq-fetcher")

    async def stop(self) -> None:
        for task in (self._task, *self._requests):
            if task is not None:
                task.cancel()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._requests:
            await asyncio.wait(self._requests)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.reset_positions()
                self._send_fetches()
            except MQError as exc:
                log.debug("fetcher: %r", exc)
                self._backoff_until = time.monotonic() + self._backoff_s
            delay = self._backoff_until - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            await self._wake.wait()

    async def reset_positions(self) -> None:
        """Look up every position that is not known (what the task does before fetching)."""
        todo = {tp: s.reset for tp, s in self.states.items() if s.position is None and s.reset}
        if not todo:
            return
        committed_wanted = {tp for tp, reset in todo.items() if reset == "committed"}
        if committed_wanted:
            if self.committed_lookup is None:
                committed = {}
            else:
                epochs = {tp: self.states[tp].epoch for tp in committed_wanted}
                committed = await self.committed_lookup(committed_wanted)
            for tp in committed_wanted:
                state = self.states.get(tp)
                if state is None or state.position is not None:
                    continue
                if tp in committed and state.epoch == epochs[tp]:
                    state.seek(committed[tp])
                    del todo[tp]
                else:
                    todo[tp] = state.reset = self.auto_offset_reset
        policy_error = [tp for tp, reset in todo.items() if reset == "none"]
        for tp in policy_error:
            self.states[tp].error = OffsetOutOfRangeError(f"{tp} has no position (reset 'none')")
            self.states[tp].reset = None
            self._data.set()
        asks = {
            tp: EARLIEST_TIMESTAMP if reset == "earliest" else LATEST_TIMESTAMP
            for tp, reset in todo.items()
            if reset != "none"
        }
        epochs = {tp: self.states[tp].epoch for tp in asks}
        found = await list_offsets(self._client, asks, isolation_level=self.isolation_level)
        for tp, (offset, _) in found.items():
            state = self.states.get(tp)
            if state is not None and state.epoch == epochs[tp] and state.position is None:
                state.seek(offset)

    def _send_fetches(self) -> None:
        metadata = self._client.metadata
        by_node: dict[int, list[tuple[TopicPartition, PartitionState]]] = {}
        for tp, state in self.states.items():
            if (
                state.fetching
                or state.paused
                or tp in self.held
                or state.position is None
                or state.error is not None
                or state.buffered >= self._partition_max
            ):
                continue
            leader = metadata.leader_for(tp)
            if leader is None:
                self._client.request_metadata_update()
                continue
            by_node.setdefault(leader, []).append((tp, state))
        loop = asyncio.get_running_loop()
        for node, parts in by_node.items():
            if self._fetches.get(node, 0) >= MAX_FETCHES_PER_BROKER:
                continue
            self._fetches[node] = self._fetches.get(node, 0) + 1
            for _, state in parts:
                state.fetching = True
            task = loop.create_task(self._fetch(node, parts))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _fetch(self, node: int, parts: list[tuple[TopicPartition, PartitionState]]) -> None:
        asked = {tp: (state, state.epoch, state.fetch_offset) for tp, state in parts}
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, state in parts:
            topics.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "fetch_offset": state.fetch_offset,
                    "partition_max_bytes": self._partition_max,
                    "current_leader_epoch": -1,
                }
            )
        body = {
            "max_wait_ms": self._max_wait_ms,
            "min_bytes": self._min_bytes,
            "max_bytes": self._max_bytes,
            "isolation_level": self.isolation_level,
            "topics": [{"name": name, "partitions": p} for name, p in topics.items()],
        }
        try:
            response: FetchResponse = await self._client.call(
                node, FETCH, body, timeout_s=self._timeout_s
            )
            self._take_response(response, asked)
        except MQError as exc:
            self._client.note_error(exc)
            self._backoff_until = time.monotonic() + self._backoff_s
        finally:
            self._fetches[node] -= 1
            for state, _, _ in asked.values():
                state.fetching = False
            self._wake.set()

    def _take_response(
        self,
        response: FetchResponse,
        asked: dict[TopicPartition, tuple[PartitionState, int, int | None]],
    ) -> None:
        got_data = False
        for topic in response["topics"]:
            for part in topic["partitions"]:
                tp = TopicPartition(topic["name"], part["partition"])
                entry = asked.get(tp)
                if entry is None or self.states.get(tp) is not entry[0]:
                    continue  # unassigned meanwhile
                state, epoch, offset = entry
                if state.epoch != epoch or state.fetch_offset != offset:
                    continue  # a seek happened meanwhile
                if part["error"]:
                    self._partition_error(tp, state, error_for_code(part["error"])(part["message"]))
                    got_data = got_data or state.error is not None
                    continue
                state.high_watermark = part["high_watermark"]
                self._corrupt.pop(tp, None)
                raw = bytes(part["records"])  # decoded from msgpack: already bytes, not copied
                if raw and state.append(raw):
                    got_data = True
        if got_data:
            self._data.set()

    def _partition_error(self, tp: TopicPartition, state: PartitionState, error: MQError) -> None:
        if isinstance(error, OffsetOutOfRangeError):
            if self.auto_offset_reset == "none":
                state.error = error
            else:
                log.info("%s: offset %s out of range, resetting", tp, state.fetch_offset)
                state.seek(None, self.auto_offset_reset)
        elif isinstance(error, CorruptRecordError) and error.retriable:
            self._client.note_error(error)  # the leader may move to a healthy replica
            self._backoff_until = time.monotonic() + self._backoff_s
            now = time.monotonic()
            offset, since, attempts = self._corrupt.get(tp, (None, now, 0))
            if offset != state.fetch_offset:
                since, attempts = now, 0
            attempts += 1
            self._corrupt[tp] = (state.fetch_offset, since, attempts)
            if now - since >= self._corrupt_retry_s or attempts >= CORRUPT_RETRY_MAX:
                del self._corrupt[tp]
                log.error("%s: giving up on corrupt data at offset %s", tp, state.fetch_offset)
                state.error = CorruptRecordError(
                    f"{tp} at offset {state.fetch_offset}: still corrupt after {attempts} "
                    f"attempts over {now - since:.1f} s: {error.message}"
                )
        elif error.retriable:
            self._client.note_error(error)
            self._backoff_until = time.monotonic() + self._backoff_s
        else:
            state.error = error

    # -- handing out records ------------------------------------------------------------------

    def has_data(self) -> bool:
        """Whether :meth:`take` has something to hand out: records or an error.

        Records of paused or held partitions do not count: ``wait_for_data``
        would return at once, and a ``getmany`` loop spin without yielding.
        """
        return any(
            state.error is not None or (state.chunks and not state.paused and tp not in self.held)
            for tp, state in self.states.items()
        )

    async def wait_for_data(self, timeout_s: float) -> None:
        self._data.clear()
        if self.has_data():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._data.wait()

    def take(
        self, partitions: Iterable[TopicPartition] | None, max_records: int
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` records, decoding batches as needed; raises a partition's error."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        items = (
            list(self.states.items())
            if partitions is None
            else [(tp, self.states[tp]) for tp in partitions if tp in self.states]
        )
        if len(items) > 1:  # rotate, so that one busy partition does not starve the others
            self._rotate = start = (self._rotate + 1) % len(items)
            items = items[start:] + items[:start]
        budget = max_records
        for tp, state in items:
            if state.error is not None:
                error, state.error = state.error, None
                if out:
                    state.error = error  # hand out what we have; raise on the next call
                    break
                raise error
            if not state.chunks or state.paused or tp in self.held:
                continue
            records = state.take(tp, budget)
            if records:
                out[tp] = records
                budget -= len(records)
                if budget <= 0:
                    break
        if any(s.buffered < self._partition_max for s in self.states.values()):
            self.wake()
        return out

    def take_raw(
        self, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, RawRecords]:
        """One undecoded chunk per partition that has one; raises a partition's error."""
        out: dict[TopicPartition, RawRecords] = {}
        tps = list(self.states if partitions is None else partitions)
        for tp in tps:
            state = self.states.get(tp)
            if state is None or state.paused or tp in self.held:
                continue
            if state.error is not None:
                error, state.error = state.error, None
                if out:
                    state.error = error
                    break
                raise error
            raw = state.take_raw()
            if raw is not None:
                out[tp] = raw
        if out:
            self.wake()
        return out

    def take_one(self, partitions: Iterable[TopicPartition] | None = None) -> ConsumerRecord | None:
        """The next record of the given (default: any) partitions, or None.

        Starts at a different partition each call (no partition starves) and
        raises a partition's pending error.
        """
        tps = list(self.states if partitions is None else partitions)
        if len(tps) > 1:
            self._rotate = start = (self._rotate + 1) % len(tps)
            tps = tps[start:] + tps[:start]
        for tp in tps:
            state = self.states.get(tp)
            if state is None:
                continue
            if state.error is not None:
                error, state.error = state.error, None
                raise error
            if state.chunks and not state.paused and tp not in self.held:
                records = state.take(tp, 1)
                if state.buffered < self._partition_max and not state.fetching:
                    self._wake.set()  # room for the next fetch of this partition
                if records:
                    return records[0]
        return None

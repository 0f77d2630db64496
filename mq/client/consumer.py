"""The asyncio consumer, shaped like aiokafka's ``AIOKafkaConsumer``.

::

    async with Consumer("events", bootstrap="127.0.0.1:9292", group_id="g",
                        auto_offset_reset="earliest") as consumer:
        batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
        async for record in consumer:
            ...
        await consumer.commit()

Three ways to get partitions: ``subscribe`` with a ``group_id`` (the group
coordinator assigns them, see :mod:`mq.client.group`; a
:class:`~mq.client.listener.ConsumerRebalanceListener` hears of each
change); ``subscribe``
without one (every partition of the topics, following new ones); or
``assign`` (exactly these; commits still go to the group if there is one).
Records come from the :class:`~mq.client.fetcher.Fetcher`, which prefetches
and decodes lazily.

A subscribed topic that a metadata refresh reports as not existing makes
``getmany``/``getone`` raise :class:`~mq.errors.UnknownTopicOrPartitionError`
(instead of waiting forever for records that cannot come), unless
``allow_auto_topic_creation=True`` asks the broker to create it, which it does
if its ``auto_create_topics`` is on (else the error says it is off).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Literal, Unpack

from mq.client.client import Client
from mq.client.fetch_buffer import PartitionState, RawRecords
from mq.client.fetcher import CORRUPT_RETRY_S, Fetcher
from mq.client.group import GroupMember, require_group
from mq.client.listener import ConsumerRebalanceListener
from mq.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from mq.client.security import SecurityOptions, security_from
from mq.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from mq.errors import ClientStateError, MQError, UnknownTopicOrPartitionError
from mq.wire.limits import validate_topic_name

Assignor = Literal["range", "roundrobin", "sticky"]


UNKNOWN_TOPIC_REFRESHES = 2
"""Metadata refreshes in a row that must report a subscribed topic missing before the
consumer raises: one broker's answer may lag (a broker restarting, or one that has not
yet heard of a topic just created elsewhere); a second refresh, asked for at once,
may go to another broker. Costs a retry backoff (100 ms) before the error."""


class Consumer:
    """Reads records from topics; see the module docstring."""

    def __init__(
        self,
        *topics: str,
        bootstrap: str = "127.0.0.1:9292",
        client_id: str = "mq-consumer",
        group_id: str | None = None,
        group_instance_id: str | None = None,
        auto_offset_reset: Literal["earliest", "latest", "none"] = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        rebalance_timeout_ms: int = 60_000,
        partition_assignment_strategy: Assignor = "range",
        isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        allow_auto_topic_creation: bool = False,
        corrupt_retry_timeout_ms: int = int(CORRUPT_RETRY_S * 1000),
        **security: Unpack[SecurityOptions],
    ) -> None:
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError("isolation_level is 'read_uncommitted' or 'read_committed'")
        if partition_assignment_strategy not in ("range", "roundrobin", "sticky"):
            raise ValueError("partition_assignment_strategy is 'range', 'roundrobin' or 'sticky'")
        self._topics = set(topics)
        self._client = Client(
            bootstrap,
            client_id=client_id,
            request_timeout_s=request_timeout_ms / 1000,
            metadata_max_age_s=metadata_max_age_ms / 1000,
            retry_backoff_s=retry_backoff_ms / 1000,
            allow_auto_topic_creation=allow_auto_topic_creation,
            security=security_from(security),
        )
        self._unknown_topic: UnknownTopicOrPartitionError | None = None
        """Set when refreshes report a subscribed topic missing; cleared when it exists."""
        self._unknown_refreshes = 0
        """Metadata refreshes in a row that reported a subscribed topic missing."""
        self._fetcher = Fetcher(
            self._client,
            auto_offset_reset=auto_offset_reset,
            fetch_max_wait_s=fetch_max_wait_ms / 1000,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            isolation_level=1 if isolation_level == "read_committed" else 0,
            request_timeout_s=request_timeout_ms / 1000,
            retry_backoff_s=retry_backoff_ms / 1000,
            corrupt_retry_s=corrupt_retry_timeout_ms / 1000,
        )
        self._group: GroupMember | None = None
        if group_id is not None:
            self._group = GroupMember(
                self._client,
                self._fetcher,
                group_id=group_id,
                group_instance_id=group_instance_id,
                session_timeout_s=session_timeout_ms / 1000,
                rebalance_timeout_s=rebalance_timeout_ms / 1000,
                heartbeat_interval_s=heartbeat_interval_ms / 1000,
                assignor=partition_assignment_strategy,
                auto_commit_interval_s=auto_commit_interval_ms / 1000
                if enable_auto_commit
                else None,
                retry_backoff_s=retry_backoff_ms / 1000,
            )
            self._fetcher.committed_lookup = self._group.fetch_committed
        self._mode: Literal["none", "subscribed", "assigned"] = "none"
        self._started = False
        self._stopping = False
        """In :meth:`stop`: a rebalance listener may still commit, nothing else starts."""
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, start the fetcher, and subscribe to the topics given to the constructor."""
        if self._started:
            return
        await self._client.start()
        self._fetcher.start()
        self._client.add_metadata_listener(self._follow_partitions)
        self._client.add_metadata_listener(self._note_unknown_topics)
        self._started = True
        if self._group is not None:
            self._group.start_auto_commit()
        if self._topics:
            self.subscribe(self._topics)

    async def stop(self) -> None:
        """Revoke (the listener may commit), commit (auto-commit), leave (unless static), close."""
        if self._closed or self._stopping:
            return
        self._stopping = True
        try:
            if self._started and self._group is not None:
                await self._group.stop()
        finally:
            self._closed = True
            if self._started:
                await self._fetcher.stop()
                await self._client.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _check(self) -> None:
        if not self._started or self._closed:
            raise ClientStateError("the consumer is not running (call start() first)")
        if self._group is not None and self._group.fatal is not None:
            raise self._group.fatal
        if self._unknown_topic is not None:
            raise self._unknown_topic

    def _note_unknown_topics(self) -> None:
        """After each metadata refresh: does a subscribed topic not exist?"""
        if self._mode != "subscribed":
            self._unknown_topic = None
            return
        errors = self._client.metadata.topic_errors
        missing = sorted(
            t for t in self._topics if errors.get(t) == UnknownTopicOrPartitionError.code
        )
        self._unknown_refreshes = self._unknown_refreshes + 1 if missing else 0
        if not missing:
            self._unknown_topic = None
            return
        if self._unknown_refreshes < UNKNOWN_TOPIC_REFRESHES:
            self._client.request_metadata_update()  # ask again before believing it
            return
        why = (
            "and the broker does not create topics automatically (auto_create_topics)"
            if self._client.allow_auto_topic_creation
            else "(create it first, or pass allow_auto_topic_creation=True)"
        )
        names = ", ".join(repr(t) for t in missing)
        self._unknown_topic = UnknownTopicOrPartitionError(
            f"topic {names} does not exist {why}"
            if len(missing) == 1
            else f"topics {names} do not exist {why}"
        )
        self._fetcher.wake_waiters()

    # -- what to read -------------------------------------------------------------------------

    def subscribe(
        self, topics: Iterable[str], listener: ConsumerRebalanceListener | None = None
    ) -> None:
        """Read these topics: via the group with a group_id, else every partition of them.

        ``listener`` (group mode) hears of the partitions revoked, assigned and
        lost (see :mod:`mq.client.listener`).
        """
        if listener is not None and not isinstance(listener, ConsumerRebalanceListener):
            raise TypeError(f"listener must be a ConsumerRebalanceListener, not {listener!r}")
        self._check()
        if self._mode == "assigned":
            raise ClientStateError("assign() and subscribe() cannot be mixed")
        wanted = set(topics)
        for topic in wanted:
            validate_topic_name(topic)
        self._mode = "subscribed"
        self._topics = wanted
        self._client.add_topics(self._topics)
        if self._group is not None:
            self._group.listener = listener
            self._group.subscribe(self._topics)
        else:
            self._follow_partitions()

    def _follow_partitions(self) -> None:
        """Without a group, a subscription covers every partition of its topics."""
        if self._mode != "subscribed" or self._group is not None:
            return
        wanted = {
            TopicPartition(topic, p)
            for topic in self._topics
            for p in self._client.metadata.partitions_for(topic) or ()
        }
        current = set(self._fetcher.states)
        self._fetcher.remove(current - wanted)
        for tp in sorted(wanted - current):
            self._fetcher.add(tp, None)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (from committed offsets with a group, else the policy)."""
        self._check()
        if self._mode == "subscribed":
            raise ClientStateError("assign() and subscribe() cannot be mixed")
        self._mode = "assigned"
        wanted = {TopicPartition(*tp) for tp in partitions}
        current = set(self._fetcher.states)
        self._fetcher.remove(current - wanted)
        for tp in sorted(wanted - current):
            self._fetcher.add(tp, None, reset="committed" if self._group else None)

    def unsubscribe(self) -> None:
        self._fetcher.remove(list(self._fetcher.states))
        self._mode = "none"
        self._topics = set()
        if self._group is not None:
            self._group.subscribe(set())

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now."""
        return set(self._fetcher.states)

    def subscription(self) -> set[str]:
        return set(self._topics)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self._fetcher.wake()
        self._fetcher.data_ready()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._fetcher.states.items() if s.paused}

    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self._fetcher.states.get(tp)
        if state is None:
            raise ClientStateError(f"{tp} is not assigned to this consumer")
        return state

    # -- reading ------------------------------------------------------------------------------

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition: what is buffered, or the first to arrive within ``timeout_ms``."""
        self._check()
        limit = max_records if max_records is not None else 1 << 31
        wanted = partitions or None
        got = self._fetcher.take(wanted, limit)
        if got or timeout_ms <= 0:
            return got
        deadline = time.monotonic() + timeout_ms / 1000
        while not got:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await self._fetcher.wait_for_data(remaining)
            self._check()
            got = self._fetcher.take(wanted, limit)
        return got

    async def getmany_raw(
        self, *partitions: TopicPartition, timeout_ms: int = 0
    ) -> dict[TopicPartition, RawRecords]:
        """Fetched data as it came, undecoded: a chunk of whole batches per partition.

        For readers that decode batches themselves (the Spark connector turns
        them into Arrow columns): the batches are RecordBatch v2 as the broker
        sent them, CRCs not yet checked, and records below each chunk's
        ``position`` must be skipped. Waits up to ``timeout_ms`` for the first.
        """
        self._check()
        wanted = partitions or None
        got = self._fetcher.take_raw(wanted)
        deadline = time.monotonic() + timeout_ms / 1000
        while not got and (remaining := deadline - time.monotonic()) > 0:
            await self._fetcher.wait_for_data(remaining)
            self._check()
            got = self._fetcher.take_raw(wanted)
        return got

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (waiting as long as it takes)."""
        while True:
            self._check()
            record = self._fetcher.take_one(partitions or None)
            if record is not None:
                return record
            await self._fetcher.wait_for_data(3600.0)

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        if self._closed:
            raise StopAsyncIteration
        return await self.getone()

    # -- positions ------------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next (buffered records are dropped)."""
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self._state(partition)
        self._fetcher.seek(partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._fetcher.states):
            self._state(tp)
            self._fetcher.seek(tp, None, "earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._fetcher.states):
            self._state(tp)
            self._fetcher.seek(tp, None, "latest")

    async def seek_to_committed(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._fetcher.states):
            self._state(tp)
            self._fetcher.seek(tp, None, "committed")

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record this consumer will return for ``partition``."""
        self._check()
        state = self._state(partition)
        if state.position is None:
            await self._fetcher.reset_positions()
            state = self._state(partition)
            if state.position is None:
                raise state.error or MQError(f"the position of {partition} is unknown")
        position: int = state.position
        return position

    def highwater(self, partition: TopicPartition) -> int:
        """The partition's high watermark as of the last fetch (-1 before one)."""
        hw: int = self._state(partition).high_watermark
        return hw

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset at or after each time (ms); None where no record is that recent."""
        self._check()
        found = await list_offsets(
            self._client, timestamps, isolation_level=self._fetcher.isolation_level
        )
        return {
            tp: OffsetAndTimestamp(*found[tp]) if found[tp][0] >= 0 else None for tp in timestamps
        }

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        self._check()
        found = await list_offsets(self._client, dict.fromkeys(partitions, EARLIEST_TIMESTAMP))
        return {tp: offset for tp, (offset, _) in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next record will get)."""
        self._check()
        found = await list_offsets(
            self._client,
            dict.fromkeys(partitions, LATEST_TIMESTAMP),
            isolation_level=self._fetcher.isolation_level,
        )
        return {tp: offset for tp, (offset, _) in found.items()}

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        self._check()
        self._client.add_topics([topic])
        await self._client.refresh_metadata()
        parts = self._client.metadata.partitions_for(topic)
        return None if parts is None else set(parts)

    # -- commits -------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (next offsets to read), by default every assigned position."""
        self._check()
        await require_group(self._group).commit(offsets)

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of ``partition`` (None: nothing committed)."""
        self._check()
        found = await require_group(self._group).fetch_committed({partition})
        return found.get(partition)

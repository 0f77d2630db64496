"""Blocking wrappers for code that is not async (scripts, the Spark connector).

Each wrapper owns a private event loop running in a daemon thread and calls
the asyncio client on it; every method blocks until the call is done (with
an optional ``timeout_s``, after which RequestTimedOutError is raised and the
call is cancelled). The wrapped client never leaves its loop, so a wrapper
may be used from any one thread at a time (it is not made for concurrent use
from several threads).

::

    with SyncProducer(bootstrap="127.0.0.1:9292") as producer:
        producer.send_and_wait("events", b"hello")
    with SyncConsumer("events", bootstrap="127.0.0.1:9292",
                      auto_offset_reset="earliest") as consumer:
        batches = consumer.poll(timeout_ms=1000)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar

import uvloop

from mq.client.admin import (
    Admin,
    ClusterDescription,
    GroupDescription,
    PartitionReassignment,
    TopicDescription,
)
from mq.client.consumer import Consumer
from mq.client.fetch_buffer import RawRecords
from mq.client.futures import SentRecords
from mq.client.producer import Producer
from mq.client.producer_states import ProducerState
from mq.client.types import ConsumerRecord, OffsetAndTimestamp, RecordMetadata, TopicPartition
from mq.errors import RequestTimedOutError
from mq.records.records import Header
from mq.wire.apis_core import ConfigEntry

T = TypeVar("T")


class LoopThread:
    """An event loop (uvloop) running in a daemon thread, and a way to call into it."""

    def __init__(self, name: str) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (cancelled after ``timeout_s``)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RequestTimedOutError(f"no result within {timeout_s}s") from None

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a plain function on the loop's thread (the clients are not thread-safe)."""

        async def call() -> T:
            return fn(*args)

        return self.run(call())

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class _Wrapper:
    _thread: LoopThread

    def _stop(self) -> Coroutine[Any, Any, None]:
        raise NotImplementedError

    def close(self, timeout_s: float | None = None) -> None:
        """Stop the client and its loop thread."""
        try:
            if not self._thread.loop.is_closed():
                self._thread.run(self._stop(), timeout_s)
        finally:
            self._thread.close()

    def __enter__(self: T) -> T:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _started(thread: LoopThread, factory: Callable[[], Any]) -> Any:
    async def make() -> Any:
        client = factory()
        await client.start()
        return client

    try:
        return thread.run(make())
    except BaseException:
        thread.close()
        raise


class SyncProducer(_Wrapper):
    """:class:`~mq.client.producer.Producer` with blocking methods (same arguments)."""

    def __init__(self, bootstrap: str = "127.0.0.1:9292", **kwargs: Any) -> None:
        self._thread = LoopThread("mq-sync-producer")
        self._producer: Producer = _started(self._thread, lambda: Producer(bootstrap, **kwargs))

    def _stop(self) -> Coroutine[Any, Any, None]:
        return self._producer.stop()

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Append a record (blocking until it is in a batch); a future of its metadata."""
        out: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()

        async def send() -> None:
            record = await self._producer.send(topic, value, key, headers, partition, timestamp_ms)
            record.add_done_callback(lambda f: _copy_outcome(f, out))

        self._thread.run(send())
        return out

    def send_and_wait(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        timeout_s: float | None = None,
    ) -> RecordMetadata:
        coro = self._producer.send_and_wait(topic, value, key, headers, partition, timestamp_ms)
        return self._thread.run(coro, timeout_s)

    def send_many(
        self, records: Iterable[Mapping[str, Any]], timeout_s: float | None = None
    ) -> list[RecordMetadata]:
        """Send many records in one call (each a mapping of :meth:`send`'s arguments) and
        wait for all of them, in order; raises the first failure.

        Runs of consecutive keyless, headerless records of one topic (and one
        ``partition`` and ``timestamp_ms``, or none) go through the batched path,
        :meth:`Producer.send_many`: a batch is filled in one pass instead of one
        call per record. Other records are sent one by one, in their place."""
        batch = list(records)

        async def send_all() -> list[RecordMetadata]:
            sent: list[Any] = []  # SentRecords of a run, or one record's future
            run: list[bytes | None] = []
            run_of: tuple[Any, ...] | None = None

            async def flush_run() -> None:
                if run_of is not None:
                    topic, partition, timestamp_ms = run_of
                    sent.append(
                        await self._producer.send_many(
                            topic, list(run), partition=partition, timestamp_ms=timestamp_ms
                        )
                    )
                    run.clear()

            for record in batch:
                if _bulk_ready(record):
                    of = (record["topic"], record.get("partition"), record.get("timestamp_ms"))
                    if of != run_of:
                        await flush_run()
                        run_of = of
                    run.append(record.get("value"))
                    continue
                await flush_run()
                run_of = None
                sent.append(await self._producer.send(**record))
            await flush_run()
            out: list[RecordMetadata] = []
            for item in sent:
                if isinstance(item, SentRecords):
                    out += await item
                else:
                    out.append(await item)
            return out

        return self._thread.run(send_all(), timeout_s)

    def flush(self, timeout_s: float | None = None) -> None:
        self._thread.run(self._producer.flush(), timeout_s)

    def partitions_for(self, topic: str) -> list[int]:
        return self._thread.run(self._producer.partitions_for(topic))


_BULK_FIELDS = frozenset({"topic", "value", "key", "headers", "partition", "timestamp_ms"})
"""The fields :meth:`SyncProducer.send_many` accepts on its batched path (with no key and
no headers)."""


def _bulk_ready(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` can go through :meth:`Producer.send_many` (keyless, headerless)."""
    return (
        "topic" in record
        and record.keys() <= _BULK_FIELDS
        and record.get("key") is None
        and not record.get("headers")
        and isinstance(record.get("value"), bytes | None)
    )


def _copy_outcome(source: Any, target: concurrent.futures.Future[RecordMetadata]) -> None:
    if source.cancelled():
        target.cancel()
    elif (error := source.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


class SyncConsumer(_Wrapper):
    """:class:`~mq.client.consumer.Consumer` with blocking methods (same arguments)."""

    def __init__(self, *topics: str, bootstrap: str = "127.0.0.1:9292", **kwargs: Any) -> None:
        self._thread = LoopThread("mq-sync-consumer")
        self._consumer: Consumer = _started(
            self._thread, lambda: Consumer(*topics, bootstrap=bootstrap, **kwargs)
        )

    def _stop(self) -> Coroutine[Any, Any, None]:
        return self._consumer.stop()

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition, waiting up to ``timeout_ms`` for the first (getmany)."""
        return self._thread.run(
            self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        )

    def poll_raw(self, timeout_ms: int = 0) -> dict[TopicPartition, RawRecords]:
        """Undecoded batches by partition (:meth:`Consumer.getmany_raw`)."""
        return self._thread.run(self._consumer.getmany_raw(timeout_ms=timeout_ms))

    def __iter__(self) -> Any:
        """Every record as it comes (blocking; stop with close() from the loop body)."""
        while not self._thread.loop.is_closed():
            for records in self.poll(timeout_ms=1000).values():
                yield from records

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._thread.call(self._consumer.assign, list(partitions))

    def subscribe(self, topics: Iterable[str]) -> None:
        self._thread.call(self._consumer.subscribe, list(topics))

    def assignment(self) -> set[TopicPartition]:
        return self._thread.call(self._consumer.assignment)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._thread.call(self._consumer.seek, partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._thread.call(self._consumer.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._thread.call(self._consumer.seek_to_end, *partitions)

    def position(self, partition: TopicPartition) -> int:
        return self._thread.run(self._consumer.position(partition))

    def highwater(self, partition: TopicPartition) -> int:
        return self._thread.call(self._consumer.highwater, partition)

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        self._thread.run(self._consumer.commit(offsets))

    def committed(self, partition: TopicPartition) -> int | None:
        return self._thread.run(self._consumer.committed(partition))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._thread.run(self._consumer.offsets_for_times(timestamps))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._consumer.beginning_offsets(list(partitions)))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._consumer.end_offsets(list(partitions)))

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._thread.run(self._consumer.partitions_for_topic(topic))


class SyncAdmin(_Wrapper):
    """:class:`~mq.client.admin.Admin` with blocking methods (same arguments)."""

    def __init__(self, bootstrap: str = "127.0.0.1:9292", **kwargs: Any) -> None:
        self._thread = LoopThread("mq-sync-admin")
        self._admin: Admin = _started(self._thread, lambda: Admin(bootstrap, **kwargs))

    def _stop(self) -> Coroutine[Any, Any, None]:
        return self._admin.stop()

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        *,
        exist_ok: bool = False,
    ) -> bool:
        return self._thread.run(
            self._admin.create_topic(
                name, partitions, replication_factor, configs, exist_ok=exist_ok
            )
        )

    def delete_topic(self, name: str) -> None:
        self._thread.run(self._admin.delete_topic(name))

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._thread.run(self._admin.list_topics(include_internal=include_internal))

    def describe_topic(self, name: str) -> TopicDescription:
        return self._thread.run(self._admin.describe_topic(name))

    def describe_configs(self, topic: str, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
        return self._thread.run(self._admin.describe_configs(topic, keys))

    def alter_configs(self, topic: str, configs: Mapping[str, str | None]) -> None:
        self._thread.run(self._admin.alter_configs(topic, configs))

    def topic_partitions(self, topic: str) -> list[TopicPartition]:
        return self._thread.run(self._admin.topic_partitions(topic))

    def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: Literal["earliest", "latest"] | int = "latest",
    ) -> dict[TopicPartition, int]:
        return self._thread.run(self._admin.list_offsets(list(partitions), spec))

    def describe_producers(
        self, partitions: Iterable[TopicPartition], producer_ids: Iterable[int] | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        return self._thread.run(self._admin.describe_producers(list(partitions), producer_ids))

    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return self._thread.run(self._admin.delete_records(offsets))

    def describe_cluster(self) -> ClusterDescription:
        return self._thread.run(self._admin.describe_cluster())

    def reassign_partitions(self, moves: Mapping[TopicPartition, Sequence[int] | None]) -> None:
        self._thread.run(self._admin.reassign_partitions(moves))

    def list_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        return self._thread.run(self._admin.list_reassignments(partitions))

    def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> list[TopicPartition]:
        return self._thread.run(self._admin.elect_leaders(partitions))

    def list_groups(self) -> list[tuple[str, str]]:
        return self._thread.run(self._admin.list_groups())

    def describe_group(self, group_id: str) -> GroupDescription:
        return self._thread.run(self._admin.describe_group(group_id))

    def reset_offsets(
        self,
        group_id: str,
        topic: str,
        to: Literal["earliest", "latest"] | int,
        partitions: Iterable[int] | None = None,
    ) -> dict[TopicPartition, int]:
        return self._thread.run(self._admin.reset_offsets(group_id, topic, to, partitions))

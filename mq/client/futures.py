"""The per-record result of ``Producer.send()``: a cheap handle on its batch's outcome.

A batch completes once (its base offset, or an error); each record's
:class:`RecordFuture` derives its :class:`~mq.client.types.RecordMetadata`
from that outcome and its index in the batch. No asyncio future exists per
record unless something waits on that record or adds a callback to it —
creating and resolving one per record would cost about as much as encoding it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from functools import partial
from typing import Any

from mq.client.producer_batch import ProducerBatch
from mq.client.types import RecordMetadata
from mq.errors import MQError


def _metadata_of(batch: ProducerBatch, index: int, timestamp: int) -> RecordMetadata:
    offset = batch.base_offset + index if batch.base_offset >= 0 else -1
    stamp = batch.log_append_time if batch.log_append_time >= 0 else timestamp
    return RecordMetadata(batch.tp.topic, batch.tp.partition, offset, stamp)


def _error_of(batch: ProducerBatch) -> MQError:
    """A fresh copy of the batch's error per record (tracebacks are not shared)."""
    error = batch.error
    assert error is not None
    copy = type(error)(error.message)
    copy.__cause__ = error
    return copy


def _resolve(
    future: asyncio.Future[RecordMetadata], index: int, ts: int, batch: ProducerBatch
) -> None:
    if future.done():
        return
    if batch.error is not None:
        future.set_exception(_error_of(batch))
    else:
        future.set_result(_metadata_of(batch, index, ts))


class RecordFuture:
    """The outcome of one ``send()``: await it for the record's :class:`RecordMetadata`.

    Behaves as an :class:`asyncio.Future` (``asyncio.isfuture`` is true; it
    works with ``await``, ``asyncio.gather``, ``wait``, ``wait_for``,
    ``add_done_callback``, ``done``, ``result``, ``exception``, ``cancel``),
    but costs a few pointers until used: the real future is made on first
    ``await`` or callback, and a record whose future is never looked at costs
    nothing more. Cancelling it stops the wait, not the delivery (as in Kafka).
    """

    __slots__ = ("_batch", "_future", "_index", "_timestamp")
    _asyncio_future_blocking = False  # makes asyncio.isfuture() accept it

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp
        self._future: asyncio.Future[RecordMetadata] | None = None

    def __repr__(self) -> str:
        state = "pending" if not self.done() else "done"
        return f"<RecordFuture {self._batch.tp.topic}-{self._batch.tp.partition} {state}>"

    def _real(self) -> asyncio.Future[RecordMetadata]:
        future = self._future
        if future is None:
            future = self._future = asyncio.get_running_loop().create_future()
            self._batch.add_callback(partial(_resolve, future, self._index, self._timestamp))
        return future

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if self._future is None and self._batch.done:
            return self.result()
        return (yield from self._real().__await__())

    __iter__ = __await__

    def done(self) -> bool:
        return self._batch.done if self._future is None else self._future.done()

    def cancelled(self) -> bool:
        return self._future is not None and self._future.cancelled()

    def result(self) -> RecordMetadata:
        if self._future is not None:
            return self._future.result()
        batch = self._batch
        if not batch.done:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        if batch.error is not None:
            raise _error_of(batch)
        return _metadata_of(batch, self._index, self._timestamp)

    def exception(self) -> BaseException | None:
        if self._future is not None:
            return self._future.exception()
        if not self._batch.done:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        return None if self._batch.error is None else _error_of(self._batch)

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        self._real().add_done_callback(lambda _: fn(self), context=context)

    def remove_done_callback(self, fn: Any) -> int:
        return 0 if self._future is None else self._future.remove_done_callback(fn)

    def cancel(self, msg: Any = None) -> bool:
        return self._real().cancel(msg)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._real().get_loop()


class SentRecords:
    """The outcome of one ``send_many()``: await it for every record's metadata, in order.

    Holds one ``(batch, first index, count)`` span per batch the values went
    into; nothing exists per record until the metadata is asked for.
    """

    __slots__ = ("_spans", "_timestamp")

    def __init__(self, spans: list[tuple[ProducerBatch, int, int]], timestamp: int) -> None:
        self._spans = spans
        self._timestamp = timestamp

    def __len__(self) -> int:
        return sum(count for _, _, count in self._spans)

    def __repr__(self) -> str:
        return f"<SentRecords {len(self)} records in {len(self._spans)} batches>"

    def __await__(self) -> Generator[Any, None, list[RecordMetadata]]:
        pending = {id(batch): batch for batch, _, _ in self._spans if not batch.done}
        if pending:
            loop = asyncio.get_running_loop()
            waits = []
            for batch in pending.values():
                future: asyncio.Future[None] = loop.create_future()
                batch.add_callback(partial(_set_done, future))
                waits.append(future)
            yield from asyncio.gather(*waits).__await__()
        return self.result()

    def done(self) -> bool:
        return all(batch.done for batch, _, _ in self._spans)

    def result(self) -> list[RecordMetadata]:
        """Every record's metadata (raises the first failed batch's error)."""
        out: list[RecordMetadata] = []
        for batch, first, count in self._spans:
            if not batch.done:
                raise asyncio.InvalidStateError("the records are not acknowledged yet")
            if batch.error is not None:
                raise _error_of(batch)
            out += [_metadata_of(batch, i, self._timestamp) for i in range(first, first + count)]
        return out


def _set_done(future: asyncio.Future[None], _: ProducerBatch) -> None:
    if not future.done():
        future.set_result(None)

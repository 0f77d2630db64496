"""RecordFuture: a cheap per-record handle that behaves as an asyncio future."""

from __future__ import annotations

import asyncio

import pytest

from mq.client.accumulator import RecordAccumulator
from mq.client.futures import RecordFuture
from mq.client.types import RecordMetadata, TopicPartition
from mq.errors import NotLeaderOrFollowerError

TP = TopicPartition("t", 2)


def batch_with(count: int) -> tuple[list[RecordFuture], object]:
    acc = RecordAccumulator()
    futures = []
    batch = None
    for i in range(count):
        placed = acc.append(TP, None, b"v", (), 100 + i, 0.0)
        assert placed is not None
        batch, index = placed
        futures.append(RecordFuture(batch, index, 100 + i))
    return futures, batch


async def test_await_gather_and_result_after_completion() -> None:
    futures, batch = batch_with(3)
    assert all(asyncio.isfuture(f) for f in futures)
    assert not futures[0].done()
    with pytest.raises(asyncio.InvalidStateError):
        futures[0].result()
    waiter = asyncio.ensure_future(asyncio.gather(*futures))
    first = asyncio.ensure_future(_await(futures[1]))
    await asyncio.sleep(0)
    batch.complete(50)  # type: ignore[attr-defined]
    assert await first == RecordMetadata("t", 2, 51, 101)
    assert await waiter == [RecordMetadata("t", 2, 50 + i, 100 + i) for i in range(3)]
    assert futures[2].done()
    assert futures[2].exception() is None
    assert await futures[2] == RecordMetadata("t", 2, 52, 102)  # already done: no suspension


async def _await(future: RecordFuture) -> RecordMetadata:
    return await future


async def test_failures_raise_a_copy_of_the_batch_error() -> None:
    futures, batch = batch_with(2)
    batch.fail(NotLeaderOrFollowerError("moved"))  # type: ignore[attr-defined]
    with pytest.raises(NotLeaderOrFollowerError, match="moved") as one:
        await futures[0]
    with pytest.raises(NotLeaderOrFollowerError) as two:
        futures[1].result()
    assert one.value is not two.value
    assert one.value.__cause__ is two.value.__cause__
    assert isinstance(futures[1].exception(), NotLeaderOrFollowerError)


async def test_callbacks_timeouts_and_cancel_touch_only_one_record() -> None:
    futures, batch = batch_with(2)
    called: list[object] = []
    futures[0].add_done_callback(called.append)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(futures[1], 0.01)  # cancels its own wait only
    assert futures[1].cancelled()
    batch.complete(0, log_append_time=999)  # type: ignore[attr-defined]
    await asyncio.sleep(0)
    assert called == [futures[0]]
    assert futures[0].result() == RecordMetadata("t", 2, 0, 999)
    assert futures[0].get_loop() is asyncio.get_running_loop()


async def test_acks_zero_records_have_no_offset() -> None:
    futures, batch = batch_with(1)
    batch.complete(-1)  # type: ignore[attr-defined]
    assert (await futures[0]).offset == -1

"""The produce handler against a stand-in broker: what happens to appends it stops waiting for."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from mq.broker import handlers_data
from mq.broker.context import RequestContext
from mq.errors import CorruptRecordError, RequestTimedOutError
from mq.replication.cluster_state import TopicRecord


class _Partition:
    def __init__(self, future: asyncio.Future[Any]) -> None:
        self._future = future

    def append(self, data: bytes, acks: int = 1) -> asyncio.Future[Any]:
        future, self._future = self._future, None
        return future


class _Broker:
    metrics = None  # no HTTP listener: nothing counted

    def __init__(self, partition: _Partition) -> None:
        self._partition = partition

    def topic(self, name: str) -> TopicRecord:
        return TopicRecord(name, "id", 1)

    def leader_partition(self, topic: str, index: int) -> _Partition:
        return self._partition


async def test_an_append_that_fails_after_its_produce_timed_out_is_not_reported_unseen() -> None:
    # found by tests/fuzz/test_broker_fuzz.py: the broker logged "Future exception
    # was never retrieved" (with a traceback) for each such append
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        future: asyncio.Future[Any] = loop.create_future()
        body = {
            "acks": -1,
            "timeout_ms": 0,
            "topics": [{"name": "t", "partitions": [{"partition": 0, "records": b"x"}]}],
        }
        broker: Any = _Broker(_Partition(future))
        response = await handlers_data.produce(broker, RequestContext(1, "test"), body)
        assert response["topics"][0]["partitions"][0]["error"] == RequestTimedOutError.code
        future.set_exception(CorruptRecordError("found bad after the answer"))
        del future, broker
        gc.collect()
        assert not reported, reported
    finally:
        loop.set_exception_handler(previous)

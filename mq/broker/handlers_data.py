"""Handlers of the data path: produce, fetch (long poll), list_offsets.

The broker's hot path. A produce hands each partition's batches to its writer
*before the handler first awaits* (unless it auto-creates a topic), so two
produces pipelined on one connection append in arrival order (one naming more
than :data:`~mq.broker.pacing.ENTRIES_PER_TURN` partitions gives the event loop
turns as it goes, and its connection starts nothing until its appends are all
queued: :func:`~mq.broker.pacing.queued`); the handler then
waits for every partition's ack together: the leader's write for acks=1, the
high watermark for acks=-1. Only the leader of a partition serves it. A fetch
reads whole batches as memoryviews of the segment maps and hands them to the
encoder: nothing here looks at a record.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from mq.broker.broker import Broker
from mq.broker.context import (
    RequestContext,
    by_topic,
    duplicate_partitions,
    set_error,
    wait_for_any,
)
from mq.broker.pacing import Pacer, queued
from mq.broker.partition import Partition
from mq.errors import InvalidRequestError, InvalidTopicError, MQError, RequestTimedOutError
from mq.storage.log import AppendInfo
from mq.wire.apis_data import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchedPartition,
    FetchRequest,
    FetchResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListedOffset,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProducedPartition,
    ProduceRequest,
    ProduceResponse,
)


async def produce(broker: Broker, ctx: RequestContext, body: ProduceRequest) -> ProduceResponse:
    """Append each partition's batches; answer when the acks level is met (or time runs out)."""
    pending: list[tuple[str, ProducedPartition, Partition, asyncio.Future[AppendInfo]]] = []
    topics: ProduceResponse = {"topics": []}
    repeated = duplicate_partitions(body["topics"])
    pacer = Pacer()
    for topic in body["topics"]:
        results: list[ProducedPartition] = []
        topics["topics"].append({"name": topic["name"], "partitions": results})
        for part in topic["partitions"]:
            if pacer.due():  # a produce of many partitions: other clients get turns
                await asyncio.sleep(0)  # (its connection starts nothing meanwhile)
            result: ProducedPartition = {
                "partition": part["partition"],
                "error": 0,
                "message": None,
                "base_offset": -1,
                "log_append_time": -1,
                "log_start_offset": -1,
            }
            results.append(result)
            try:
                if repeated and (topic["name"], part["partition"]) in repeated:
                    raise InvalidRequestError(
                        f"partition {topic['name']}-{part['partition']} appears more than once "
                        "in the produce request: none of its entries was appended"
                    )
                found = broker.topic(topic["name"])
                if found is None:  # auto-creation: only a topic's first produce waits here
                    found = await broker.topics.ensure_topic(topic["name"])
                if found.internal:  # as Kafka: the broker's alone
                    raise InvalidTopicError(f"cannot append to internal topic {topic['name']}")
                partition = broker.leader_partition(topic["name"], part["partition"])
                future = partition.append(part["records"], body["acks"])
                future.add_done_callback(_seen)  # the answer may go before the append is done
                pending.append((topic["name"], result, partition, future))
            except MQError as exc:
                set_error(result, exc)
    queued()  # every append is queued: its connection's next request may start
    if not pending:
        return topics
    futures = [f for *_, f in pending]
    if not all(f.done() for f in futures):  # usually done already: the writer was idle
        timeout = body["timeout_ms"] / 1000 if body["acks"] != 0 else None
        await asyncio.wait(futures, timeout=timeout)
    meters = broker.metrics
    for name, result, partition, future in pending:
        if not future.done():  # O(1): not a search of the done list (issue 18, F5)
            set_error(result, RequestTimedOutError(f"{name}: no ack within timeout_ms"))
            continue
        failure = future.exception()
        if isinstance(failure, MQError):
            set_error(result, failure)
        elif failure is not None:
            raise failure
        else:
            appended = future.result()
            result["base_offset"] = appended.first_offset
            if meters is not None:  # per partition appended, from its offsets: no record read
                count = appended.last_offset - appended.first_offset + 1
                meters.produced(name, count, appended.size, ctx.principal, ctx.client_id)
            # the partition appended to, even if its topic was deleted since
            result["log_start_offset"] = partition.log.log_start_offset
    return topics


def _seen(future: asyncio.Future[AppendInfo]) -> None:
    """Mark an append's error as retrieved.

    A produce that timed out, or was cancelled with its connection, no longer
    reports it, and asyncio would log it as lost ("exception was never retrieved").
    """
    if not future.cancelled():
        future.exception()


async def _fetch_once(
    broker: Broker,
    body: FetchRequest,
    results: dict[tuple[str, int], FetchedPartition],
    ends: dict[tuple[str, int], int],
) -> int:
    """Read every partition not yet answered; return the bytes gathered so far."""
    total = 0
    budget = body["max_bytes"]
    pacer = Pacer()
    for topic in body["topics"]:
        for part in topic["partitions"]:
            if pacer.due():  # reads only: other clients may act in between
                await asyncio.sleep(0)
            key = (topic["name"], part["partition"])
            result = results[key]
            if result["error"] or result["records"]:
                total += len(result["records"])
                budget = max(0, budget - len(result["records"]))
                continue
            try:
                partition = broker.leader_partition(*key, part["current_leader_epoch"])
                result["high_watermark"] = partition.high_watermark
                result["last_stable_offset"] = partition.high_watermark
                result["log_start_offset"] = partition.log.log_start_offset
                if budget <= 0 and total > 0:
                    continue  # only the first partition with data may go past max_bytes
                found = partition.read(
                    part["fetch_offset"], min(part["partition_max_bytes"], budget)
                )
            except MQError as exc:
                set_error(result, exc)
                continue
            if found is not None:
                result["records"] = found.data
                ends[key] = found.next_offset - max(found.first_offset, part["fetch_offset"])
                total += len(found.data)
                budget = max(0, budget - len(found.data))
    return total


async def fetch(broker: Broker, ctx: RequestContext, body: FetchRequest) -> FetchResponse:
    """Whole batches per partition; wait up to max_wait_ms for min_bytes to be there."""
    results: dict[tuple[str, int], FetchedPartition] = {}
    pacer = Pacer()
    for topic in body["topics"]:
        for part in topic["partitions"]:
            if pacer.due():
                await asyncio.sleep(0)
            results[(topic["name"], part["partition"])] = {
                "partition": part["partition"],
                "error": 0,
                "message": None,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "records": b"",
            }
    deadline = time.monotonic() + body["max_wait_ms"] / 1000
    offsets: dict[tuple[str, int], int] = {}
    """Offsets each partition's answer covers (records sent, without reading a record)."""
    while True:
        total = await _fetch_once(broker, body, results, offsets)
        remaining = deadline - time.monotonic()
        if total >= body["min_bytes"] or remaining <= 0 or ctx.closing:
            break
        hosted = [
            broker.partitions[key]
            for key, result in results.items()
            if not result["error"] and key in broker.partitions
        ]
        if not await wait_for_any(hosted, remaining):
            break
    meters = broker.metrics
    if meters is not None:
        for (name, index), count in offsets.items():
            size = len(results[(name, index)]["records"])
            meters.consumed(name, count, size, ctx.principal, ctx.client_id)
    response: FetchResponse = {"topics": cast(Any, by_topic(body["topics"], results))}
    return response


async def list_offsets(
    broker: Broker, ctx: RequestContext, body: ListOffsetsRequest
) -> ListOffsetsResponse:
    """Earliest (-2), latest (-1: the high watermark), or the first offset at or after a time."""
    response: ListOffsetsResponse = {"topics": []}
    pacer = Pacer()
    for topic in body["topics"]:
        results: list[ListedOffset] = []
        response["topics"].append({"name": topic["name"], "partitions": results})
        for part in topic["partitions"]:
            if pacer.due():  # reads only: other clients may act in between
                await asyncio.sleep(0)
            result: ListedOffset = {
                "partition": part["partition"],
                "error": 0,
                "message": None,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            results.append(result)
            try:
                partition = broker.leader_partition(
                    topic["name"], part["partition"], part["current_leader_epoch"]
                )
                result["leader_epoch"] = partition.leader_epoch
                timestamp = part["timestamp"]
                if timestamp != EARLIEST_TIMESTAMP:
                    partition.require_caught_up()
                if timestamp == LATEST_TIMESTAMP:
                    result["offset"], result["timestamp"] = partition.high_watermark, -1
                elif timestamp == EARLIEST_TIMESTAMP:
                    result["offset"], result["timestamp"] = partition.log.log_start_offset, -1
                else:
                    found = partition.log.offset_for_timestamp(timestamp)
                    if found is not None and found[0] < partition.high_watermark:
                        result["offset"], result["timestamp"] = found
                    else:
                        result["offset"], result["timestamp"] = -1, -1
            except MQError as exc:
                set_error(result, exc)
    return response


async def init_producer_id(
    broker: Broker, ctx: RequestContext, body: InitProducerIdRequest
) -> InitProducerIdResponse:
    """A new producer id (epoch 0), or the next epoch of the one the producer has."""
    if body["producer_id"] < 0:
        return {"producer_id": await broker.producer_ids.allocate(), "producer_epoch": 0}
    pid, epoch = await broker.producer_ids.bump(body["producer_id"], body["producer_epoch"])
    return {"producer_id": pid, "producer_epoch": epoch}

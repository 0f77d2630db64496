"""The leader's side of replication: answering followers' replica_fetch requests.

Per partition: check that this broker leads it in the epoch the follower
believes current, check that the follower's log does not diverge (the end
offset of its last epoch here is at or past its fetch offset), record the
follower's log end (which moves the high watermark and, once it has caught
up, brings it back into the ISR), then read whole batches up to the leader's
log end. Followers outside the ISR are served from the catch-up token bucket.
Long poll as fetch: the answer waits up to max_wait_ms for min_bytes.
"""

from __future__ import annotations

import time
from typing import Any, cast

from mq.broker.broker import Broker
from mq.broker.catalog import SHARE_STATE_TOPIC
from mq.broker.context import RequestContext, by_topic, set_error, wait_for_any
from mq.broker.partition import Partition
from mq.errors import (
    InvalidTopicError,
    MQError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from mq.wire.apis_replication import (
    NO_EPOCH,
    InternalAppendRequest,
    InternalAppendResponse,
    ReplicaFetchedPartition,
    ReplicaFetchPartition,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)

Key = tuple[str, int]


def _check(
    broker: Broker,
    node: int,
    key: Key,
    part: ReplicaFetchPartition,
    result: ReplicaFetchedPartition,
) -> Partition | None:
    """The partition if the follower may read from it now; else fill ``result`` and None."""
    partition = broker.partition(*key)
    partition.require_leader(part["current_leader_epoch"])
    if partition.state is None or node not in partition.state.replicas:
        raise NotLeaderOrFollowerError(f"node {node} is not a replica of {partition.name}")
    result["high_watermark"] = partition.high_watermark
    result["log_start_offset"] = partition.log.log_start_offset
    offset = part["fetch_offset"]
    if part["last_fetched_epoch"] != NO_EPOCH:
        epoch, end = partition.log.end_offset_for_epoch(part["last_fetched_epoch"])
        if epoch != part["last_fetched_epoch"] or end < offset:
            result["diverging_epoch"], result["diverging_end_offset"] = epoch, end
            return None
    if offset > partition.local_end:
        # ahead of the leader in the same epoch: only a lost write here explains it
        result["diverging_epoch"], result["diverging_end_offset"] = NO_EPOCH, partition.local_end
        return None
    if offset < partition.log.log_start_offset:
        raise OffsetOutOfRangeError(
            f"{offset} is below the log start {partition.log.log_start_offset} of {partition.name}"
        )
    partition.follower_fetched(node, offset)
    return partition


def _read_once(
    broker: Broker,
    node: int,
    max_bytes: int,
    ready: dict[Key, tuple[Partition, int]],
    results: dict[Key, ReplicaFetchedPartition],
) -> int:
    """Read every partition without data yet; the bytes gathered so far."""
    total, budget = 0, max_bytes
    now = time.monotonic()
    for key, (partition, offset) in ready.items():
        result = results[key]
        if result["records"]:
            total += len(result["records"])
            budget = max(0, budget - len(result["records"]))
            continue
        if budget <= 0 and total > 0:
            continue
        limit = min(budget, broker.config.replica_fetch_max_bytes)
        throttled = node not in partition.isr
        if throttled:
            limit = min(limit, broker.catchup_bucket.available(now))
            if limit <= 0:
                continue
        try:
            found = partition.read_for_follower(offset, limit)
        except MQError as exc:
            set_error(result, exc)
            continue
        result["high_watermark"] = partition.high_watermark
        result["log_start_offset"] = partition.log.log_start_offset
        if found is not None:
            result["records"] = found.data
            total += len(found.data)
            budget = max(0, budget - len(found.data))
            if throttled:
                broker.catchup_bucket.take(len(found.data), now)
    return total


async def replica_fetch(
    broker: Broker, ctx: RequestContext, body: ReplicaFetchRequest
) -> ReplicaFetchResponse:
    node = body["replica_id"]
    results: dict[Key, ReplicaFetchedPartition] = {}
    ready: dict[Key, tuple[Partition, int]] = {}
    for topic in body["topics"]:
        for part in topic["partitions"]:
            key = (topic["name"], part["partition"])
            result: ReplicaFetchedPartition = {
                "partition": part["partition"],
                "error": 0,
                "message": None,
                "high_watermark": -1,
                "log_start_offset": -1,
                "diverging_epoch": NO_EPOCH,
                "diverging_end_offset": -1,
                "records": b"",
            }
            results[key] = result
            try:
                partition = _check(broker, node, key, part, result)
            except MQError as exc:
                set_error(result, exc)
                continue
            if partition is not None:
                ready[key] = (partition, part["fetch_offset"])
                if node not in partition.isr and node in partition.caught_up():
                    broker.isr.expand(partition, node)
    deadline = time.monotonic() + body["max_wait_ms"] / 1000
    answered = len(results) > len(ready)  # an error or a divergence goes back at once
    while ready:
        total = _read_once(broker, node, body["max_bytes"], ready, results)
        remaining = deadline - time.monotonic()
        if answered or total >= body["min_bytes"] or remaining <= 0 or ctx.closing:
            break
        if not await wait_for_any((p for p, _ in ready.values()), remaining):
            break
    response: ReplicaFetchResponse = {"topics": cast(Any, by_topic(body["topics"], results))}
    return response


async def internal_append(
    broker: Broker, ctx: RequestContext, body: InternalAppendRequest
) -> InternalAppendResponse:
    """Append another broker's batches to an internal topic led here (acks=all)."""
    try:
        info = broker.topic(body["topic"])
        if info is None or not info.internal:
            raise InvalidTopicError(f"{body['topic']} is not an internal topic")
        partition = broker.leader_partition(body["topic"], body["partition"])
        if body["topic"] == SHARE_STATE_TOPIC and broker.queues is not None:
            broker.queues.store.admit(bytes(body["records"]))  # fenced share-state saves
        appended = await partition.append(body["records"], acks=-1)
    except MQError as exc:
        return {"error": exc.code, "message": exc.message, "base_offset": -1}
    return {"error": 0, "message": None, "base_offset": appended.first_offset}

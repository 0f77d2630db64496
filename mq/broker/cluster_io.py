"""Appends to and reads of any partition of the cluster, from inside the broker.

Share groups keep their state in an internal topic and copy dead letters to
another topic; the partition they write may be led here (a local append) or
by another broker (a produce request through :class:`~mq.broker.peers.Peers`).
Both wait for acks=all, so what they wrote is as durable as acknowledged user
data. Reads return whole batches below the high watermark, and go on (bounded)
until they cover the offset asked for: a leader just elected or restarted serves
less than its log until its high watermark has caught up, and a reader that
stopped there would take "nothing readable yet" for "nothing there".

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from mq.errors import CoordinatorLoadInProgressError, error_for_code
from mq.records.batch import iter_batches
from mq.wire.apis_data import FETCH, PRODUCE
from mq.wire.apis_replication import INTERNAL_APPEND

if TYPE_CHECKING:
    from mq.broker.broker import Broker

READ_BYTES = 1 << 20
TIMEOUT_MS = 10_000
CATCH_UP_POLL_S = 0.05
"""Pause between reads while the leader's high watermark is below the offset wanted."""
CATCH_UP_S = TIMEOUT_MS / 1000
"""How long a read waits by default for a leader's high watermark to reach an
acknowledged offset (a leader just elected: its followers' next fetch; else the ISR
shrinks within ``replica_lag_time_max_ms``), before it fails with a retriable error
(share-state loads: the broker setting ``share_state_load_wait_ms``)."""


async def append(
    broker: Broker,
    topic: str,
    index: int,
    batch: bytes,
    admit: Callable[[bytes], None] | None = None,
) -> int:
    """Append one batch with acks=all wherever the partition is led; its first offset.

    ``admit`` (local appends; a remote leader runs its own) checks the batch just
    before it is queued, in the same step, so no other append comes between."""
    local = broker.partitions.get((topic, index))
    if local is not None and local.is_leader:
        if admit is not None:
            admit(batch)
        appended_here = await local.append(batch, acks=-1)
        return appended_here.first_offset
    record = broker.topic(topic)
    if record is not None and record.internal:  # clients may not produce there; brokers may
        body = {"topic": topic, "partition": index, "records": batch, "timeout_ms": TIMEOUT_MS}
        appended = await broker.peers.call_leader(topic, index, INTERNAL_APPEND, body)
        _raise_for(appended["error"], appended["message"])
        return int(appended["base_offset"])
    request = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": TIMEOUT_MS,
        "topics": [{"name": topic, "partitions": [{"partition": index, "records": batch}]}],
    }
    response = await broker.peers.call_leader(topic, index, PRODUCE, request)
    result = response["topics"][0]["partitions"][0]
    _raise_for(result["error"], result["message"])
    return int(result["base_offset"])


async def read(
    broker: Broker, topic: str, index: int, start: int, end: int = 0, wait_s: float = CATCH_UP_S
) -> AsyncIterator[bytes]:
    """Chunks of whole batches from ``start`` up to the high watermark, and at least up
    to ``end`` (an offset known to be acknowledged): while the leader's high watermark
    is below it, the read waits (``wait_s`` at most, then
    :class:`~mq.errors.CoordinatorLoadInProgressError`, retriable)."""
    deadline = asyncio.get_running_loop().time() + wait_s
    offset = start
    while True:
        local = broker.partitions.get((topic, index))
        if local is not None and local.is_leader:
            offset = max(offset, local.log.log_start_offset)
            high = local.high_watermark
            while offset < high and (found := local.read(offset, READ_BYTES)) is not None:
                yield bytes(found.data)
                offset = found.next_offset
        else:
            async for chunk in _read_remote(broker, topic, index, offset):
                yield chunk
                offset = _next_offset(chunk)
        if offset >= end:
            return
        if asyncio.get_running_loop().time() >= deadline:
            raise CoordinatorLoadInProgressError(
                f"{topic}-{index}: the high watermark is still below {end} (at {offset})"
            )
        await asyncio.sleep(CATCH_UP_POLL_S)


def fetch_body(
    topic: str, index: int, offset: int, max_bytes: int, *, min_bytes: int
) -> dict[str, Any]:
    """A consumer's fetch of one partition from ``offset`` that does not wait (``max_wait_ms``
    0): how a broker reads another broker's copy of an internal or damaged partition."""
    return {
        "max_wait_ms": 0,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition": index,
                        "fetch_offset": offset,
                        "partition_max_bytes": max_bytes,
                        "current_leader_epoch": -1,
                    }
                ],
            }
        ],
    }


async def _read_remote(broker: Broker, topic: str, index: int, start: int) -> AsyncIterator[bytes]:
    """Chunks of whole batches from the remote leader, up to its high watermark."""
    offset = start
    while True:
        body = fetch_body(topic, index, offset, READ_BYTES, min_bytes=0)
        response = await broker.peers.call_leader(topic, index, FETCH, body)
        result = response["topics"][0]["partitions"][0]
        if result["error"] == 1 and offset < result["log_start_offset"]:  # below the log start
            offset = result["log_start_offset"]
            continue
        _raise_for(result["error"], result["message"])
        data = bytes(result["records"])
        if not data:
            return
        yield data
        offset = _next_offset(data)
        if offset >= result["high_watermark"]:
            return


def _next_offset(data: bytes) -> int:
    last = -1
    for header in iter_batches(data):
        last = header.next_offset
    return last


def _raise_for(code: int, message: str | None) -> None:
    if code:
        raise error_for_code(code)(message)

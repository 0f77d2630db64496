"""The last N records of a partition, for the console's message browser.

Read from the partition's leader with ``fetch`` (a peer call: the leader may be
another broker), from ``max(log start, high watermark - N)`` up to the high
watermark, so what is shown is what a consumer would see. Whole batches come
back; records below the first wanted offset and control batches are skipped.

Bounds: at most :data:`MAX_RECORDS` records and :data:`MAX_FETCH_BYTES` of batches
per read. When large records fill that before the high watermark, a second read
starts where as many records as the first one held end at the high watermark: the
newest records are shown, fewer than N (``"complete"`` is false only if even that
did not reach the end). Each key, value and header value is cut to
:data:`MAX_FIELD_BYTES` (``"value_size"`` tells the full size). Bytes travel as base64: the browser
decodes them as UTF-8, JSON or hex.

Thread safety: one event loop (the broker's).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any, Final

from mq.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from mq.http.admin_data import call_node, is_offline
from mq.records.batch import split_batches
from mq.records.records import Record, decode_records
from mq.wire.apis_data import EARLIEST_TIMESTAMP, FETCH, LATEST_TIMESTAMP, LIST_OFFSETS

if TYPE_CHECKING:
    from mq.broker.broker import Broker

MAX_RECORDS: Final = 200
"""Records one browse shows: a screenful or a few, decoded in the browser."""
DEFAULT_RECORDS: Final = 20
MAX_FETCH_BYTES: Final = 4 * 1024 * 1024
"""Bytes of batches read for one browse (and the bound on one batch's decompressed size):
enough for 200 records of up to ~20 KiB, small enough to answer in milliseconds."""
FETCH_STEP_BYTES: Final = 1024 * 1024
"""Bytes asked for by one fetch (the leader sends at least one whole batch)."""
MAX_FIELD_BYTES: Final = 64 * 1024
"""Bytes of a key, value or header value sent to the browser; the rest is cut."""


def _b64(data: bytes | None) -> str | None:
    if data is None:
        return None
    return base64.b64encode(data[:MAX_FIELD_BYTES]).decode("ascii")


def _record_json(record: Record) -> dict[str, Any]:
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _b64(record.key),
        "key_size": None if record.key is None else len(record.key),
        "value": _b64(record.value),
        "value_size": None if record.value is None else len(record.value),
        "headers": [[name, _b64(value)] for name, value in record.headers],
    }


async def _offsets(broker: Broker, node: int, topic: str, index: int) -> tuple[int, int]:
    found = {}
    for stamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
        body = {
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition": index, "timestamp": stamp, "current_leader_epoch": -1}
                    ],
                }
            ],
        }
        response = await call_node(broker, node, LIST_OFFSETS, body)
        part = response["topics"][0]["partitions"][0]
        if part["error"]:
            raise error_for_code(part["error"])(part["message"])
        found[stamp] = part["offset"]
    return found[EARLIEST_TIMESTAMP], found[LATEST_TIMESTAMP]


async def _read(
    broker: Broker, leader: int, topic: str, index: int, first: int, end: int
) -> tuple[list[Record], int]:
    """The records of [first, end) that :data:`MAX_FETCH_BYTES` of batches hold, and the
    offset reached."""
    records: list[Record] = []
    offset, fetched = first, 0
    while offset < end and fetched < MAX_FETCH_BYTES:
        step = min(FETCH_STEP_BYTES, MAX_FETCH_BYTES - fetched)
        wanted = {
            "partition": index,
            "fetch_offset": offset,
            "partition_max_bytes": step,
            "current_leader_epoch": -1,
        }
        body = {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": step,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [wanted]}],
        }
        response = await call_node(broker, leader, FETCH, body)
        part = response["topics"][0]["partitions"][0]
        if part["error"]:
            raise error_for_code(part["error"])(part["message"])
        data = part["records"]
        if not data:
            break
        fetched += len(data)
        for header, batch in split_batches(data):
            offset = max(offset, header.next_offset)
            if header.is_control:
                continue
            decoded = decode_records(batch, max_decompressed=MAX_FETCH_BYTES)
            records.extend(r for r in decoded if first <= r.offset < end)
    return records, offset


async def last_records(broker: Broker, topic: str, index: int, limit: int) -> dict[str, Any]:
    """The last ``limit`` records of ``topic``-``index`` (oldest first)."""
    if not 1 <= limit <= MAX_RECORDS:
        raise InvalidRequestError(f"limit must be between 1 and {MAX_RECORDS}, got {limit}")
    state = broker.view.partitions.get((topic, index))
    if state is None:
        raise UnknownTopicOrPartitionError(f"{topic}-{index} does not exist")
    if is_offline(broker, state):
        raise LeaderNotAvailableError(f"{topic}-{index} has no live leader")
    start, end = await _offsets(broker, state.leader, topic, index)
    first = max(start, end - limit)
    records, reached = await _read(broker, state.leader, topic, index, first, end)
    if reached < end and records:
        # the byte bound came first: read again from where as many records as fit end
        first = max(first, end - len(records))
        records, reached = await _read(broker, state.leader, topic, index, first, end)
    shown = records[-limit:]
    return {
        "topic": topic,
        "partition": index,
        "start_offset": start,
        "end_offset": end,
        "limit": limit,
        "complete": reached >= end,
        "records": [_record_json(r) for r in shown],
    }

"""Offset lookups: list_offsets to each partition's leader, with retries.

Used by the consumer (reset policies, ``seek_to_end``, ``offsets_for_times``,
``beginning_offsets``/``end_offsets``) and the admin client. A lookup goes to
every leader involved in parallel; partitions whose leader is unknown or
answers with a stale-metadata error are retried after a metadata refresh,
until ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from mq.client.client import Client
from mq.client.types import TopicPartition
from mq.errors import MQError, RequestTimedOutError, error_for_code
from mq.wire.apis_data import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LIST_OFFSETS,
    ListOffsetsResponse,
)

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "list_offsets"]


async def list_offsets(
    client: Client,
    timestamps: Mapping[TopicPartition, int],
    *,
    isolation_level: int = 0,
    timeout_s: float = 30.0,
) -> dict[TopicPartition, tuple[int, int]]:
    """``(offset, timestamp)`` per partition for LATEST (-1), EARLIEST (-2) or a time in ms.

    For a time, the offset is that of the first record stamped at or after it,
    or -1 when there is none. Raises the first non-retriable per-partition
    error, or RequestTimedOutError when retriable errors outlast ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    wanted = dict(timestamps)
    client.add_topics(tp.topic for tp in wanted)
    found: dict[TopicPartition, tuple[int, int]] = {}
    last_error: MQError | None = None
    while wanted:
        by_leader = client.metadata.partitions_by_leader(wanted)
        leaderless = by_leader.pop(None, [])
        calls = [
            _ask(client, node, {tp: wanted[tp] for tp in tps}, isolation_level)
            for node, tps in by_leader.items()
            if node is not None
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                if not isinstance(result, MQError) or not result.retriable:
                    raise result
                last_error = result
                client.note_error(result)
                continue
            answers, errors = result
            found.update(answers)
            for tp in answers:
                wanted.pop(tp, None)
            for error in errors.values():
                if not error.retriable:
                    raise error
                last_error = error
                client.note_error(error)
        if not wanted:
            break
        if leaderless:
            client.request_metadata_update()
        if time.monotonic() >= deadline:
            raise RequestTimedOutError(
                f"no offsets for {sorted(wanted)} in {timeout_s}s: {last_error}"
            ) from last_error
        await asyncio.sleep(client.metadata.current_backoff())
        try:
            await client.refresh_metadata()
        except MQError as exc:
            last_error = exc
    return found


async def _ask(
    client: Client, node: int, timestamps: dict[TopicPartition, int], isolation_level: int
) -> tuple[dict[TopicPartition, tuple[int, int]], dict[TopicPartition, MQError]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, timestamp in timestamps.items():
        topics.setdefault(tp.topic, []).append(
            {"partition": tp.partition, "timestamp": timestamp, "current_leader_epoch": -1}
        )
    body = {
        "isolation_level": isolation_level,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
    response: ListOffsetsResponse = await client.call(node, LIST_OFFSETS, body)
    answers: dict[TopicPartition, tuple[int, int]] = {}
    errors: dict[TopicPartition, MQError] = {}
    for topic in response["topics"]:
        for part in topic["partitions"]:
            tp = TopicPartition(topic["name"], part["partition"])
            if part["error"]:
                errors[tp] = error_for_code(part["error"])(part["message"])
            else:
                answers[tp] = (part["offset"], part["timestamp"])
    return answers, errors


def by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped by topic, each list sorted (the wire's Assignment shape)."""
    out: dict[str, list[int]] = {}
    for tp in tps:
        out.setdefault(tp.topic, []).append(tp.partition)
    for parts in out.values():
        parts.sort()
    return out

"""describe_producers to each partition's leader: what it remembers of idempotent producers.

For each partition, the producers its leader knows (optionally only some ids):
epoch, the sequence of the last record appended, the time of the newest batch.
A producer whose identity is fixed by its caller (``Producer(fixed_identity=...)``,
the exactly-once Spark sink) reads it to continue exactly where an earlier
attempt stopped. Partitions whose leader is unknown or moved are retried after a
metadata refresh until ``timeout_s``, as list_offsets is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from mq.client.client import Client
from mq.client.offsets import by_topic
from mq.client.types import TopicPartition
from mq.errors import MQError, RequestTimedOutError, error_for_code
from mq.wire.apis_data import DESCRIBE_PRODUCERS, DescribeProducersResponse, ProducerState

__all__ = ["ProducerState", "Resume", "describe_producers"]


class Resume(NamedTuple):
    """What a producer with a fixed (id, epoch) has written to one partition already."""

    written: int
    """Records of this (id, epoch) the partition holds: the next sequence number."""
    start_offset: int
    """The offset of the epoch's first batch there (-1: none written, or unknown)."""


async def describe_producers(
    client: Client,
    partitions: Iterable[TopicPartition],
    producer_ids: Iterable[int] | None = None,
    *,
    timeout_s: float = 30.0,
) -> dict[TopicPartition, list[ProducerState]]:
    """The producers each partition's leader knows (only ``producer_ids`` if given)."""
    deadline = time.monotonic() + timeout_s
    wanted = set(partitions)
    ids = None if producer_ids is None else sorted(set(producer_ids))
    client.add_topics(tp.topic for tp in wanted)
    found: dict[TopicPartition, list[ProducerState]] = {}
    last_error: MQError | None = None
    while wanted:
        by_leader = client.metadata.partitions_by_leader(wanted)
        leaderless = by_leader.pop(None, [])
        calls = [
            _ask(client, node, tps, ids) for node, tps in by_leader.items() if node is not None
        ]
        for result in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(result, BaseException):
                if not isinstance(result, MQError) or not result.retriable:
                    raise result
                last_error = result
                client.note_error(result)
                continue
            answers, errors = result
            found.update(answers)
            wanted.difference_update(answers)
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
                f"no producer state for {sorted(wanted)} in {timeout_s}s: {last_error}"
            ) from last_error
        await asyncio.sleep(client.metadata.current_backoff())
        try:
            await client.refresh_metadata()
        except MQError as exc:
            last_error = exc
    return found


async def _ask(
    client: Client, node: int, tps: Iterable[TopicPartition], ids: list[int] | None
) -> tuple[dict[TopicPartition, list[ProducerState]], dict[TopicPartition, MQError]]:
    body: dict[str, Any] = {
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic(tps).items()],
        "producer_ids": ids,
    }
    response: DescribeProducersResponse = await client.call(node, DESCRIBE_PRODUCERS, body)
    answers: dict[TopicPartition, list[ProducerState]] = {}
    errors: dict[TopicPartition, MQError] = {}
    for topic in response["topics"]:
        for part in topic["partitions"]:
            tp = TopicPartition(topic["name"], part["partition"])
            if part["error"]:
                errors[tp] = error_for_code(part["error"])(part["message"])
            else:
                answers[tp] = part["producers"]
    return answers, errors

"""The queues the HTTP admin API answers about: depth by state and the oldest message's age.

A queue is a topic with ``queue.*`` configs (read from the broker's view); its
counts come from each partition's leader (``describe_queue``, a peer call, see
:mod:`mq.http.admin_data`), summed. At most :data:`MAX_QUEUES` queues per answer.

Thread safety: one event loop (the broker's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from mq.http.admin_data import MAX_PARTITIONS, call_node, code_error, error_json, is_offline
from mq.queues import config as qc
from mq.wire.apis_queues import DESCRIBE_QUEUE

if TYPE_CHECKING:
    from mq.broker.broker import Broker

MAX_QUEUES: Final = 100
"""Queues described by /api/queues: one describe_queue per leader of each."""


QUEUE_COUNTS: Final = (
    "visible",
    "delayed",
    "in_flight",
    "dead_lettering",
    "acked",
    "dead_lettered",
)


async def _queue(broker: Broker, name: str, partitions: int) -> dict[str, Any]:
    by_leader: dict[int, list[int]] = {}
    missing = 0
    for index in range(min(partitions, MAX_PARTITIONS)):
        state = broker.view.partitions.get((name, index))
        if state is None or is_offline(broker, state):
            missing += 1
        else:
            by_leader.setdefault(state.leader, []).append(index)
    entry: dict[str, Any] = {
        "name": name,
        "partitions": partitions,
        **dict.fromkeys(QUEUE_COUNTS, 0),
    }
    oldest: int | None = None
    errors: list[dict[str, Any]] = []
    calls = [
        call_node(
            broker, node, DESCRIBE_QUEUE, {"group": name, "topic": name, "partitions": indexes}
        )
        for node, indexes in by_leader.items()
    ]
    for result in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(result, BaseException):
            errors.append(error_json(result))
            continue
        for part in result["partitions"]:
            if part["error"]:
                failed = code_error(part["error"], part["message"])
                errors.append({"partition": part["partition"], **failed})
                continue
            for key in QUEUE_COUNTS:
                entry[key] += part[key]
            if part["oldest_visible_ms"] >= 0:
                stamp = part["oldest_visible_ms"]
                oldest = stamp if oldest is None else min(oldest, stamp)
    now = time.time()
    entry["oldest_age_s"] = None if oldest is None else max(0.0, now - oldest / 1000)
    entry["offline_partitions"] = missing
    entry["errors"] = errors
    return entry


def queue_names(broker: Broker) -> list[str]:
    return sorted(
        name
        for name, record in broker.view.topics.items()
        if not record.internal and qc.is_queue(record.configs)
    )


async def queues(broker: Broker, names: Iterable[str] | None = None) -> dict[str, Any]:
    """Every queue (a topic with ``queue.*`` configs) with its depth by state, bounded."""
    all_names = queue_names(broker) if names is None else list(names)
    shown = all_names[:MAX_QUEUES]
    view = broker.view
    described = await asyncio.gather(
        *(_queue(broker, n, view.topics[n].partitions) for n in shown if n in view.topics)
    )
    for entry in described:
        configs = view.topics[entry["name"]].configs
        entry["dead_letter_queue"] = qc.dead_letter_queue(configs)
        entry["visibility_timeout_ms"] = int(configs.get(qc.VISIBILITY, qc.DEFAULTS[qc.VISIBILITY]))
    return {
        "queues": described,
        "truncated": max(0, len(all_names) - MAX_QUEUES),
        "time_ms": int(time.time() * 1000),
    }

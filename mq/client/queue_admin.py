"""Managing queues: create (with the dead-letter queue), list, describe.

A queue is a topic with ``queue.*`` configs (:mod:`mq.queues.config`); these are
the admin calls behind :class:`mq.client.queue.QueueClient`'s management methods.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from mq.client.admin import Admin
from mq.client.client import Client
from mq.client.queue_messages import QueueAttributes, ms_of
from mq.client.types import TopicPartition
from mq.errors import (
    InvalidConfigError,
    NotLeaderOrFollowerError,
    TopicAlreadyExistsError,
    error_for_code,
)
from mq.queues import config as qc
from mq.wire.apis_queues import DESCRIBE_QUEUE

COUNTS = (
    "visible",
    "delayed",
    "in_flight",
    "dead_lettering",
    "acked",
    "dead_lettered",
    "deduplicated",
)
"""The counts of :class:`QueueAttributes`, summed over a queue's partitions."""


@dataclass(frozen=True)
class QueueSettings:
    """A queue's settings, as :meth:`QueueClient.create_queue` takes them (seconds)."""

    visibility_timeout: float
    max_deliveries: int
    dead_letter_queue: str | None
    delay: float
    fifo: bool
    receive_rate: int
    max_in_flight: int


async def create_queue(
    admin: Admin,
    name: str,
    partitions: int,
    settings: QueueSettings,
    replication_factor: int,
    *,
    exist_ok: bool,
) -> bool:
    """Create the queue and its dead-letter queue (if named and missing); True if the
    queue was created."""
    dead_letter_queue = settings.dead_letter_queue
    configs = {
        qc.VISIBILITY: str(ms_of(settings.visibility_timeout)),
        qc.MAX_DELIVERIES: str(settings.max_deliveries),
        qc.DEAD_LETTER_QUEUE: dead_letter_queue or "",
        qc.DELAY: str(ms_of(settings.delay)),
        qc.FIFO: "true" if settings.fifo else "false",
    }
    limits = {
        qc.RECEIVE_RATE: settings.receive_rate,
        qc.MAX_IN_FLIGHT_CONFIG: settings.max_in_flight,
    }
    if dead_letter_queue:
        if dead_letter_queue == name:
            raise InvalidConfigError("a queue cannot be its own dead-letter queue")
        with contextlib.suppress(TopicAlreadyExistsError):
            # No redelivery limit to speak of: a dead-letter queue has no dead-letter
            # queue, so running out of deliveries there would drop the dead letter.
            dlq_configs = {
                **configs,
                qc.DEAD_LETTER_QUEUE: "",
                qc.DELAY: "0",
                qc.MAX_DELIVERIES: str(qc.MAX_DELIVERIES_LIMIT),
            }
            await admin.create_topic(dead_letter_queue, partitions, replication_factor, dlq_configs)
    configs.update({key: str(value) for key, value in limits.items() if value})
    return await admin.create_topic(
        name, partitions, replication_factor, configs, exist_ok=exist_ok
    )


async def list_queues(admin: Admin) -> list[str]:
    """The topics that have queue settings (a visibility timeout of their own)."""
    queues = []
    for topic in await admin.list_topics():
        entries = await admin.describe_configs(topic, [qc.VISIBILITY])
        if any(not entry["is_default"] for entry in entries):
            queues.append(topic)
    return sorted(queues)


async def describe_queue(
    client: Client, admin: Admin, name: str, group: str, tps: list[TopicPartition]
) -> QueueAttributes:
    """The queue's settings and its counts for ``group``, summed over its partitions
    (each partition's leader is asked, once per broker)."""
    configs = {
        entry["name"]: entry["value"] or ""
        for entry in await admin.describe_configs(name)
        if entry["name"].startswith("queue.")
    }
    totals = dict.fromkeys(COUNTS, 0)
    oldest: int | None = None
    for node, owned in client.metadata.partitions_by_leader(tps).items():
        if node is None:
            raise NotLeaderOrFollowerError(f"{name}: a partition has no leader")
        body = {"group": group, "topic": name, "partitions": [tp.partition for tp in owned]}
        response = await client.call(node, DESCRIBE_QUEUE, body)
        for part in response["partitions"]:
            if part["error"]:
                raise error_for_code(part["error"])(part["message"])
            for key in totals:
                totals[key] += part[key]  # type: ignore[literal-required]
            if part["oldest_visible_ms"] >= 0:
                ts = part["oldest_visible_ms"]
                oldest = ts if oldest is None else min(oldest, ts)
    age = None if oldest is None else max(0.0, time.time() - oldest / 1000)
    return QueueAttributes(
        name, group, len(tps), oldest_visible_age_s=age, configs=configs, **totals
    )

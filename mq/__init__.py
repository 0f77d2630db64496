"""mq: a durable, replicated message queue and log broker for Python.

The public client API, shaped like aiokafka's::

    import mq

    async with mq.Producer(bootstrap="127.0.0.1:9292") as producer:
        await producer.send_and_wait("events", b"hello")
    async with mq.Consumer("events", bootstrap="127.0.0.1:9292",
                           auto_offset_reset="earliest") as consumer:
        async for record in consumer:
            ...

:class:`Producer`, :class:`Consumer`, :class:`QueueClient` (queues: receive, ack,
dead letters) and :class:`Admin` are asyncio clients;
:class:`SyncProducer`, :class:`SyncConsumer` and :class:`SyncAdmin` wrap them
for blocking code. Every error is an :class:`MQError` (see :mod:`mq.errors`).
The storage engine lives in :mod:`mq.storage`, the broker in :mod:`mq.broker`.

The names are imported on first use (PEP 562): ``import mq.errors`` or the
``mq`` command's ``--help`` do not pay for loading the client (asyncio,
msgpack, the record format).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"

if TYPE_CHECKING:
    from mq.client import (
        Admin,
        ClientQuota,
        Consumer,
        ConsumerRebalanceListener,
        ConsumerRecord,
        OffsetAndTimestamp,
        Producer,
        QueueAttributes,
        QueueClient,
        QueueMessage,
        QuotaEntity,
        Receipt,
        RecordFuture,
        RecordMetadata,
        SentRecords,
        SyncAdmin,
        SyncConsumer,
        SyncProducer,
        TopicPartition,
    )
    from mq.errors import MQError

_LAZY = {
    "Admin": "mq.client",
    "ClientQuota": "mq.client",
    "Consumer": "mq.client",
    "ConsumerRebalanceListener": "mq.client",
    "ConsumerRecord": "mq.client",
    "OffsetAndTimestamp": "mq.client",
    "Producer": "mq.client",
    "QueueAttributes": "mq.client",
    "QueueClient": "mq.client",
    "QueueMessage": "mq.client",
    "QuotaEntity": "mq.client",
    "Receipt": "mq.client",
    "RecordFuture": "mq.client",
    "RecordMetadata": "mq.client",
    "SentRecords": "mq.client",
    "SyncAdmin": "mq.client",
    "SyncConsumer": "mq.client",
    "SyncProducer": "mq.client",
    "TopicPartition": "mq.client",
    "MQError": "mq.errors",
}
"""Public name -> the module that defines it (imported on first use)."""

__all__ = [
    "Admin",
    "ClientQuota",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "MQError",
    "OffsetAndTimestamp",
    "Producer",
    "QueueAttributes",
    "QueueClient",
    "QueueMessage",
    "QuotaEntity",
    "Receipt",
    "RecordFuture",
    "RecordMetadata",
    "SentRecords",
    "SyncAdmin",
    "SyncConsumer",
    "SyncProducer",
    "TopicPartition",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Import a public name (or a subpackage such as ``mq.client``) on first use."""
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif not name.startswith("_"):
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

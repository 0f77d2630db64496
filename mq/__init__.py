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
"""

__version__ = "0.1.0.dev0"

from mq.client import (
    Admin,
    Consumer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    OffsetAndTimestamp,
    Producer,
    QueueAttributes,
    QueueClient,
    QueueMessage,
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

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "MQError",
    "OffsetAndTimestamp",
    "Producer",
    "QueueAttributes",
    "QueueClient",
    "QueueMessage",
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

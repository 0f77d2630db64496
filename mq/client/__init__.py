"""The asyncio client library (its public names are re-exported by :mod:`mq`).

Split by role, as aiokafka is (STYLE habit 11):

* :mod:`mq.client.connection`: one TCP connection (framing, correlation ids,
  pipelining, timeouts, fail-all-pending on close);
* :mod:`mq.client.metadata`: the pure cluster-metadata cache;
* :mod:`mq.client.client`: bootstrap, connection pool, metadata refresh,
  per-broker circuit breakers;
* :mod:`mq.client.producer`, with :mod:`~mq.client.accumulator` (batches),
  :mod:`~mq.client.sender` (the sender task) and :mod:`~mq.client.partitioner`;
* :mod:`mq.client.consumer`, with :mod:`~mq.client.fetcher` (prefetch, lazy
  decoding), :mod:`~mq.client.group` (membership), :mod:`~mq.client.listener`
  (rebalance callbacks) and :mod:`~mq.client.offsets`;
* :mod:`mq.client.queue`: queues (share groups: receive, ack, nack, dead letters),
  with :mod:`~mq.client.queue_messages` (messages, receipts, attributes) and
  :mod:`~mq.client.queue_poll` (receives in flight, messages kept between calls);
* :mod:`mq.client.admin`; and :mod:`mq.client.sync`, blocking wrappers.
"""

from mq.client.admin import Admin
from mq.client.admin_quotas import ClientQuota, QuotaEntity
from mq.client.consumer import Consumer
from mq.client.futures import RecordFuture, SentRecords
from mq.client.listener import ConsumerRebalanceListener
from mq.client.producer import Producer
from mq.client.queue import QueueClient
from mq.client.queue_messages import QueueAttributes, QueueMessage, Receipt
from mq.client.sync import SyncAdmin, SyncConsumer, SyncProducer
from mq.client.types import (
    ConsumerRecord,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "Admin",
    "ClientQuota",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
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
]

"""The mq sink's exactly-once writes: a task that Spark runs again writes no row twice.

Spark replays a micro-batch after a crash (of the driver, an executor, a
Python worker) with the same data: the offsets of each micro-batch are in the
query's checkpoint before it runs, and a replayable source (mq, Kafka, files)
reads the same rows for them. A retried task (an executor lost mid-task)
likewise reads its rows again. Spark's Kafka sink then writes them again (at
least once); mq's sink does not:

* **Identity.** Each task writes with an idempotent producer whose identity is
  derived, not allocated: the producer id from (the query's id, which Spark keeps
  in the checkpoint, the task's Spark partition id), the epoch from the
  micro-batch id (:func:`producer_identity`). Every attempt of one task of one
  micro-batch has the same (id, epoch); the next micro-batch has the next epoch.
  A batch ``df.write`` uses a random id made once on the driver, so its retried
  tasks resume too.
* **Positions.** Within the epoch, a record's sequence number in its partition
  is its position among the task's records for that partition: the task
  computes every row's partition itself, deterministically (the ``partition``
  column, else murmur2 of the key as Kafka's producer, else round-robin over
  the rows without a key).
* **Resume.** Before writing to a topic, the task asks each partition's leader
  (describe_producers) how many records its (id, epoch) already has there, skips
  that many of its own rows for that partition, and continues with the next
  sequence number. The broker appends a batch only if it starts right after the
  last sequence it holds for that (id, epoch), so no position is ever written
  twice, even by two live attempts at once: one of them fails and Spark retries
  it. A task killed half-way through its writes resumes after its last record
  that the broker appended.

Requirements (documented in the README): the rows a task writes, and their order,
must be the same when Spark runs it again: true for queries that read a
replayable source and transform rows one by one (select, filter, map, union,
stream-static joins); a shuffle (aggregation, repartition) can hand a task the
same rows in another order. The sink topic's partition count must not change
while a replay is pending, and the replay must come within the broker's
``producer_id_expiration_ms`` (a day by default) of the failed attempt: after
that the broker has forgotten what the attempt wrote.

Pure but for the TaskContext lookup: no network.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

from mq.client.partitioner import partition_for_key

ID_SPACE: Final = 2**62
"""Sink producer ids lie in [2**62, 2**63): far above the ids brokers allocate (from 0,
a thousand at a time), so a derived id never collides with an allocated one."""
EPOCHS_PER_ID: Final = 32_767
"""producerEpoch is an int16: micro-batch ``b`` is epoch ``b % 32767`` of the id of
generation ``b // 32767`` (a new id every 32,767 micro-batches)."""
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
"""The local property with which Spark tags a streaming query's tasks: its id (stable
across restarts from the checkpoint; not the run id)."""
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"


@dataclass(frozen=True)
class TaskIdentity:
    """Who is writing: a query (or one batch write), its task's Spark partition, and the
    micro-batch (0 for a batch write)."""

    scope: str
    partition: int
    batch: int

    def producer(self) -> tuple[int, int]:
        return producer_identity(self.scope, self.partition, self.batch)


def producer_identity(scope: str, partition: int, batch: int) -> tuple[int, int]:
    """(producer id, epoch) of a task: the same for every attempt of it."""
    generation, epoch = divmod(batch, EPOCHS_PER_ID)
    digest = hashlib.sha256(f"mq-spark-sink\0{scope}\0{partition}\0{generation}".encode()).digest()
    return ID_SPACE + int.from_bytes(digest[:8], "big") % ID_SPACE, epoch


def stream_task_identity(
    partition: int, query_id: str | None, batch_id: str | None
) -> TaskIdentity | None:
    """The identity of a streaming query's task, from the local properties Spark sets
    (None if they are missing: then the task writes at least once)."""
    if not query_id or batch_id is None or not batch_id.lstrip("-").isdigit():
        return None
    return TaskIdentity(f"query {query_id}", partition, int(batch_id))


class Positions:
    """Where each of a task's rows goes and whether an earlier attempt wrote it already.

    ``skip[topic][partition]`` is how many records the earlier attempts wrote to
    that partition (from :meth:`~mq.client.producer.Producer.resume_sequences`);
    :meth:`place` gives a row its partition and says whether to send it.
    """

    def __init__(self, task_partition: int) -> None:
        self.skip: dict[str, dict[int, int]] = {}
        self._seen: dict[tuple[str, int], int] = {}
        self._round_robin = task_partition
        self.skipped = 0

    def knows(self, topic: str) -> bool:
        return topic in self.skip

    def resumed(self, topic: str, written: dict[int, int]) -> None:
        self.skip[topic] = written

    def place(self, topic: str, key: bytes | None, partition: int | None) -> tuple[int, bool]:
        """(partition, whether to send) of the task's next row for ``topic``."""
        partitions = len(self.skip[topic])
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, partitions)
            else:
                partition = self._round_robin % partitions
                self._round_robin += 1
        position = self._seen.get((topic, partition), 0)
        self._seen[(topic, partition)] = position + 1
        if position < self.skip[topic].get(partition, 0):
            self.skipped += 1
            return partition, False
        return partition, True

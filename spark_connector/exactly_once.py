"""The mq sink's exactly-once writes: a task that Spark runs again writes no row twice.

Spark replays a micro-batch after a crash (of the driver, an executor, a
Python worker) with the same data: the offsets of each micro-batch are in the
query's checkpoint before it runs, and a replayable source (mq, Kafka, files)
reads the same rows for them. A retried task (an executor lost mid-task)
likewise reads its rows again, though not always in the same order: after a
shuffle (repartition, aggregation) Spark may hand the retry the same rows in
another order. Spark's Kafka sink writes them again (at least once); mq's sink
does not:

* **Identity.** Each task writes with an idempotent producer whose identity is
  derived, not allocated: the producer id from (the query's id, which Spark keeps
  in the checkpoint, the task's Spark partition id), the epoch from the
  micro-batch id (:func:`producer_identity`). Every attempt of one task of one
  micro-batch has the same (id, epoch); the next micro-batch has the next epoch.
  A batch ``df.write`` uses a random id made once on the driver, so its retried
  tasks resume too.
* **Placement by content.** A row's partition depends on the row alone, never on
  its position: the ``partition`` column, else murmur2 of the key as Kafka's
  producer, else (a keyless row) the CRC-32 of its value and headers
  (:func:`place`). Rows with the same value and headers and no key go to one
  partition.
* **Resume by content.** Before writing to a topic, the task asks each
  partition's leader (describe_producers) how many records its (id, epoch)
  already has there and where the epoch's first batch is. Where an earlier
  attempt wrote, the task reads those records back (the batches marked with its
  id and epoch, from that offset: :mod:`spark_connector.read_back`) into a
  multiset of their contents (key, value, headers), and writes only its rows for
  that partition that are not in it — the multiset difference (:class:`Replay`) —
  continuing with the next sequence number. The broker appends a batch only if it
  starts right after the last sequence it holds for that (id, epoch).
* **A replay must be a superset.** If, once all its rows are seen, an earlier
  attempt wrote a row this attempt does not have, the query is not deterministic
  (its rows changed between attempts, not just their order): the task fails with
  :class:`ReplayMismatchError`, naming the partition; it never ends as if all
  were well. Rows it had already sent that the earlier attempt did not write stay
  written (the error says so).

Bounds: a task reads back at most ``resumeMaxRecords`` records
(:data:`MAX_READ_BACK_RECORDS`), checked against the broker's count before
reading; only a 16-byte digest of each is kept.

Requirements (documented in the README): a replay's rows must be the same
multiset (any order) as the earlier attempt's: true for queries that read a
replayable source and apply deterministic transformations, shuffles included;
not for ``rand()``, ``uuid()``, ``current_timestamp()`` in the written columns,
or ``limit`` without an order. Two attempts live at once (Spark's speculation,
off by default, or an executor presumed lost that still runs) write different
rows under one (id, epoch): the broker refuses a batch whose sequence range the
other already wrote with other records (its CRC differs: a second writer, not a
retry), so that attempt fails; if their writes interleave, the next attempt's
read-back finds rows that are not its own and fails with
:class:`ReplayMismatchError`. Loud either way, never a silent loss. The sink topic's partition
count must not change while a replay is pending, the earlier attempt's records
must still be in the topic (retention, compaction), and the replay must come
within the broker's ``producer_id_expiration_ms`` (a day by default) of the
failed attempt: after that the broker has forgotten what the attempt wrote.

Pure but for the TaskContext lookup: no network.
"""

from __future__ import annotations

import hashlib
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

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
MAX_READ_BACK_RECORDS: Final = 1_000_000
"""Records a task reads back from earlier attempts of it, over all partitions (sink
option ``resumeMaxRecords``): it keeps a 16-byte digest of each in a multiset, about
150 bytes of Python memory each, so at most ~150 MB in a Python worker; a task of a
micro-batch seldom writes more. Checked against the broker's count before reading."""


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


def place(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
    partition: int | None,
    partitions: int,
) -> int:
    """The partition of a row, from its content only (never from its position)."""
    if partition is not None:
        return partition
    if key is not None:
        return partition_for_key(key, partitions)
    crc = zlib.crc32(value) if value is not None else zlib.crc32(b"\xff")
    for name, header in headers:
        crc = zlib.crc32(name.encode(), crc)
        crc = zlib.crc32(b"\xff" if header is None else b"\x00" + header, crc)
    return crc % partitions


def fingerprint(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> bytes:
    """A 16-byte digest of what the sink compares rows on: key, value and headers (a
    null and an empty value differ; so do header orders)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (key, value):
        _put(digest, part)
    digest.update(len(headers).to_bytes(4, "big"))
    for name, header in headers:
        _put(digest, name.encode())
        _put(digest, header)
    return digest.digest()


def _put(digest: Any, part: bytes | None) -> None:
    if part is None:
        digest.update(b"\xff")
    else:
        digest.update(b"\x00" + len(part).to_bytes(8, "big"))
        digest.update(part)


class ReplayMismatchError(RuntimeError):
    """A replay lacks rows an earlier attempt of its task wrote: the query is not
    deterministic."""


class ReadBackTooLargeError(RuntimeError):
    """An earlier attempt wrote more than a task may read back."""


class Replay:
    """A task's rows against what earlier attempts of it wrote (a multiset per partition).

    :meth:`written_before` says whether a row is one of them (and takes it out of
    the multiset); :meth:`check` fails if the earlier attempts wrote rows that this
    attempt did not have. Partitions without earlier records cost nothing.
    """

    def __init__(self) -> None:
        self.earlier: dict[tuple[str, int], Counter[bytes]] = {}
        self.skipped = 0

    def add(self, topic: str, partition: int, written: Counter[bytes]) -> None:
        """What earlier attempts wrote to a partition: digests (:func:`fingerprint`)."""
        if written:
            self.earlier[(topic, partition)] = written

    def written_before(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> bool:
        """Whether an earlier attempt wrote this row (each written row matches once)."""
        earlier = self.earlier.get((topic, partition))
        if earlier is None:
            return False
        digest = fingerprint(key, value, headers)
        left = earlier.get(digest, 0)
        if not left:
            return False
        if left == 1:
            del earlier[digest]
            if not earlier:
                del self.earlier[(topic, partition)]
        else:
            earlier[digest] = left - 1
        self.skipped += 1
        return True

    def check(self, sent: int) -> None:
        """Raise :class:`ReplayMismatchError` if earlier rows were not all in this attempt."""
        if not self.earlier:
            return
        missing = {f"{t}-{p}": sum(c.values()) for (t, p), c in sorted(self.earlier.items())}
        raise ReplayMismatchError(
            f"this attempt of the task does not have {sum(missing.values())} of the rows an "
            f"earlier attempt of it wrote (per partition: {missing}): the query is not "
            "deterministic (its rows changed between attempts, not only their order), so "
            "exactly-once cannot hold. Make the written rows deterministic (no rand(), "
            "uuid(), current_timestamp(), unordered limit) or write with an at-least-once "
            f"sink. This attempt had already written {sent} rows that the earlier one had "
            "not; they stay in the topic"
        )

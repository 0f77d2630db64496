"""Reading back what earlier attempts of a sink task wrote, so that a replay writes the rest.

A task of the exactly-once sink (:mod:`spark_connector.exactly_once`) that finds
records of its producer (id, epoch) in a partition reads them back: from the
offset of the epoch's first batch (describe_producers' ``epoch_start_offset``),
the batches marked with its id and epoch, until it has as many records as the
broker counts for them. Other producers' batches in between are skipped by
their header, undecoded. Only a digest of each record is kept
(:func:`~spark_connector.exactly_once.fingerprint`), and the count is checked
against ``resumeMaxRecords`` before anything is read.

Reading needs READ on the topic, as asking describe_producers does: a sink
principal with WRITE only gets an error that says so.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Final

from mq.client.consumer import Consumer
from mq.client.producer import Producer
from mq.client.producer_states import Resume
from mq.client.types import TopicPartition
from mq.errors import OffsetOutOfRangeError, TopicAuthorizationFailedError
from mq.records.batch import split_batches
from mq.records.records import decode_records
from spark_connector.exactly_once import ReadBackTooLargeError, Replay, fingerprint
from spark_connector.options import WriteOptions
from spark_connector.security import client_kwargs

READ_BACK_FETCH_BYTES: Final = 4 * 1024 * 1024
"""Bytes per fetch while reading back: batches are digested and dropped as they come."""


class ReadBackError(RuntimeError):
    """What an earlier attempt wrote cannot be read back (so the replay cannot resume)."""


class Resumer:
    """Per topic a task writes to: its partition count, and what earlier attempts wrote
    there (in :attr:`replay`), read back once, the first time the task meets the topic."""

    def __init__(
        self, producer: Producer, identity: tuple[int, int], options: WriteOptions
    ) -> None:
        self.producer = producer
        self.identity = identity
        self.options = options
        self.replay = Replay()
        self.partitions: dict[str, int] = {}
        self.budget = options.resume_max_records

    async def partitions_of(self, topic: str) -> int:
        """The partition count of ``topic``, after reading back what was written there."""
        count = self.partitions.get(topic)
        if count is not None:
            return count
        resumed = await _resume(self.producer, topic)
        written = sum(r.written for r in resumed.values())
        if written > self.budget:
            raise ReadBackTooLargeError(
                f"earlier attempts of this task wrote {written} records to {topic!r}; a retried "
                f"task reads back at most {self.options.resume_max_records} (option "
                "resumeMaxRecords: a digest of each is held in memory) to write only the rest. "
                "Raise resumeMaxRecords, or make the tasks smaller (more partitions)"
            )
        self.budget -= written
        for partition, resume in sorted(resumed.items()):
            if resume.written:
                digests = await read_back(self.options, topic, partition, self.identity, resume)
                self.replay.add(topic, partition, digests)
        self.partitions[topic] = len(resumed)
        return len(resumed)


async def _resume(producer: Producer, topic: str) -> dict[int, Resume]:
    """What an earlier attempt of the task wrote to ``topic`` (describe_producers, which
    needs READ on the topic, as Kafka's DescribeProducers): a refusal says why a sink
    asks for READ."""
    try:
        return await producer.resume(topic)
    except TopicAuthorizationFailedError as exc:
        raise _needs_read(exc, topic) from exc


def _needs_read(exc: TopicAuthorizationFailedError, topic: str) -> TopicAuthorizationFailedError:
    return TopicAuthorizationFailedError(
        f"{exc.message}. The mq sink needs READ as well as WRITE on topic {topic!r}: "
        "before writing, each task asks the topic's leaders what an earlier attempt of "
        "it wrote (describe_producers, which needs READ, as Kafka's DescribeProducers) and "
        "reads those records back, so that a retried or replayed task writes no row twice"
    )


async def read_back(
    options: WriteOptions,
    topic: str,
    partition: int,
    identity: tuple[int, int],
    resume: Resume,
) -> Counter[bytes]:
    """Digests of the ``resume.written`` records of producer ``identity`` in the partition."""
    pid, epoch = identity
    where = f"{topic}-{partition}"
    if resume.start_offset < 0:
        raise ReadBackError(
            f"{where} holds {resume.written} records of an earlier attempt of this task but "
            "its leader does not say where they start (a broker older than the sink's "
            "exactly-once read-back, or producer state from one): cannot resume safely"
        )
    tp = TopicPartition(topic, partition)
    consumer = Consumer(
        bootstrap=options.bootstrap,
        client_id="mq-spark-read-back",
        auto_offset_reset="none",
        enable_auto_commit=False,
        max_partition_fetch_bytes=READ_BACK_FETCH_BYTES,
        request_timeout_ms=options.request_timeout_ms,
        **client_kwargs(options.security),
    )
    found: Counter[bytes] = Counter()
    count = 0
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, resume.start_offset)
        patience = options.request_timeout_ms / 1000
        deadline = time.monotonic() + patience
        while count < resume.written:
            chunk = (await consumer.getmany_raw(tp, timeout_ms=500)).get(tp)
            if chunk is None:
                if time.monotonic() > deadline:
                    raise ReadBackError(
                        f"read back only {count} of the {resume.written} records an earlier "
                        f"attempt of this task wrote to {where} (from offset "
                        f"{resume.start_offset}) in {patience:g}s: are they compacted away, or "
                        "is the partition's high watermark stuck?"
                    )
                continue
            deadline = time.monotonic() + patience
            for header, batch in split_batches(chunk.data):
                if (
                    header.producer_id != pid
                    or header.producer_epoch != epoch
                    or header.is_control
                    or header.last_offset < chunk.position
                ):
                    continue
                for record in decode_records(batch):
                    if record.offset >= chunk.position and count < resume.written:
                        found[fingerprint(record.key, record.value, record.headers)] += 1
                        count += 1
    except OffsetOutOfRangeError as exc:
        raise ReadBackError(
            f"the records an earlier attempt of this task wrote to {where} from offset "
            f"{resume.start_offset} are gone (retention or delete_records): cannot resume "
            f"safely: {exc}"
        ) from exc
    except TopicAuthorizationFailedError as exc:
        raise _needs_read(exc, topic) from exc
    finally:
        await consumer.stop()
    return found

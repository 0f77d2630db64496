"""One producer batch: records for one partition, encoded once, sent and retried as a unit.

Pure (no I/O): the accumulator fills and closes batches, the sender completes
or fails them, and the records' futures (:mod:`mq.client.futures`) read the
outcome. An idempotent producer that must start a new epoch re-stamps the
header of the closed batches still queued (:meth:`ProducerBatch.restamp`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mq.client.types import TopicPartition
from mq.errors import MQError
from mq.records.batch import parse_header, write_header
from mq.records.records import BatchBuilder, Header


class ProducerBatch:
    """Records for one partition, encoded as they come, sent and retried as one unit."""

    __slots__ = (
        "attempts",
        "base_offset",
        "base_sequence",
        "builder",
        "callbacks",
        "count",
        "created",
        "data",
        "deadline",
        "done",
        "error",
        "last_error",
        "log_append_time",
        "max_bytes",
        "retry_at",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        builder: BatchBuilder,
        *,
        created: float,
        deadline: float,
        max_bytes: int,
        base_sequence: int = -1,
    ) -> None:
        self.tp = tp
        self.builder: BatchBuilder | None = builder
        self.count = 0
        self.max_bytes = max_bytes
        self.created = created
        self.deadline = deadline
        """Past this time the batch fails (delivery timeout) instead of being retried."""
        self.base_sequence = base_sequence
        self.data: bytes | None = None
        """The built batch, once closed."""
        self.attempts = 0
        self.retry_at = 0.0
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: MQError | None = None
        self.last_error: MQError | None = None
        """The retriable error of the latest failed attempt (what a timeout reports)."""
        self.callbacks: list[Callable[[ProducerBatch], None]] | None = None

    def __repr__(self) -> str:
        state = "open" if self.is_open else "done" if self.done else "closed"
        return f"<ProducerBatch {self.tp.topic}-{self.tp.partition} {self.count} records {state}>"

    @property
    def is_open(self) -> bool:
        return self.builder is not None

    def try_append(
        self, key: bytes | None, value: bytes | None, headers: Sequence[Header], timestamp: int
    ) -> int:
        """Encode one record; its index in the batch, or -1 if the batch is full."""
        builder = self.builder
        if builder is None:
            return -1
        if builder.append(key, value, headers, timestamp, max_batch_bytes=self.max_bytes):
            index = self.count
            self.count = index + 1
            return index
        return -1

    def try_append_values(self, values: Sequence[bytes | None], start: int, timestamp: int) -> int:
        """Encode keyless records for ``values[start:]``, as many as fit; how many did."""
        builder = self.builder
        if builder is None:
            return 0
        added = builder.append_values(values, start, timestamp, max_batch_bytes=self.max_bytes)
        self.count += added
        return added

    def close(self) -> bytes:
        """Build the batch (compress, header, CRC): from now on its bytes never change."""
        builder = self.builder
        if builder is not None:
            self.data = builder.build()
            self.builder = None
        assert self.data is not None
        return self.data

    @property
    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        assert self.builder is not None
        return self.builder.size_in_bytes()

    def add_callback(self, callback: Callable[[ProducerBatch], None]) -> None:
        """Call ``callback(batch)`` when the batch completes or fails (now if it has)."""
        if self.done:
            callback(self)
        elif self.callbacks is None:
            self.callbacks = [callback]
        else:
            self.callbacks.append(callback)

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        """The broker wrote the batch at ``base_offset`` (-1: acks=0, unknown)."""
        if self.done:
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self._finish()

    def fail(self, error: MQError) -> None:
        """The batch will not be written (its records' futures raise ``error``)."""
        if self.done:
            return
        self.error = error
        self._finish()

    def _finish(self) -> None:
        self.done = True
        callbacks, self.callbacks = self.callbacks, None
        for callback in callbacks or ():
            callback(self)

    def restamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Give a closed batch a new producer id, epoch and sequence (header and CRC)."""
        data = bytearray(self.close())
        header = parse_header(data)
        write_header(
            data,
            header._replace(
                producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence
            ),
        )
        self.data = bytes(data)
        self.base_sequence = base_sequence

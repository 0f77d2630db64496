"""What a queue client hands out and takes back: messages, receipts, attributes, and the
pure helpers that turn queue_receive answers into messages.

Thread safety: values only (frozen dataclasses and named tuples).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from mq.errors import InvalidReceiptError
from mq.queues import headers as qh
from mq.records.batch import split_batches
from mq.records.records import decode_records


class Receipt(NamedTuple):
    """What names a leased message: text form ``PARTITION:OFFSET:DELIVERIES``."""

    queue: str
    group: str
    partition: int
    offset: int
    deliveries: int

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}:{self.deliveries}"

    @classmethod
    def parse(cls, queue: str, text: str, group: str | None = None) -> Receipt:
        try:
            partition, offset, deliveries = (int(part) for part in text.split(":"))
        except ValueError:
            partition = offset = deliveries = -1
        if min(partition, offset) < 0 or deliveries < 1:
            raise InvalidReceiptError(f"{text!r} is not a receipt (PARTITION:OFFSET:DELIVERIES)")
        return cls(queue, group or queue, partition, offset, deliveries)


@dataclass(frozen=True)
class QueueMessage:
    queue: str
    partition: int
    offset: int
    body: bytes | None
    key: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int
    delivery_count: int
    lease_deadline_ms: int
    group: str

    @property
    def handle(self) -> Receipt:
        return Receipt(self.queue, self.group, self.partition, self.offset, self.delivery_count)

    @property
    def receipt(self) -> str:
        return str(self.handle)


@dataclass(frozen=True)
class QueueAttributes:
    name: str
    group: str
    partitions: int
    visible: int
    delayed: int
    in_flight: int
    dead_lettering: int
    acked: int
    dead_lettered: int
    deduplicated: int
    oldest_visible_age_s: float | None
    configs: dict[str, str] = field(default_factory=dict)


Settleable = QueueMessage | Receipt


def ms_of(seconds: float) -> int:
    return round(seconds * 1000)


def encode_headers(
    headers: Mapping[str, bytes | str] | Sequence[tuple[str, bytes | None]] | None,
) -> list[tuple[str, bytes | None]]:
    if headers is None:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]


def encode_filter(
    wanted: Mapping[str, str | bytes | Iterable[str | bytes]] | None,
) -> dict[str, list[bytes]] | None:
    if not wanted:
        return None
    out: dict[str, list[bytes]] = {}
    for name, values in wanted.items():
        items = [values] if isinstance(values, str | bytes) else list(values)
        out[name] = [v.encode() if isinstance(v, str) else bytes(v) for v in items]
    return out


def frozen_filter(wanted: dict[str, list[bytes]] | None) -> Any:
    return None if wanted is None else tuple(sorted((k, tuple(v)) for k, v in wanted.items()))


INTERNAL_HEADERS = frozenset({qh.DELAY_MS, qh.DEDUP_ID})
"""Headers that ``send(delay=, dedup_id=)`` adds for the share group: not the message's
own, so a receiver does not see them (the ``mq.dlq.*`` headers of a dead letter stay)."""


def _user_headers(headers: Iterable[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    return [(name, value) for name, value in headers if name not in INTERNAL_HEADERS]


def messages_of(topic: str, group: str, part: Mapping[str, Any]) -> list[QueueMessage]:
    counts = dict(zip(part["offsets"], part["counts"], strict=True))
    if not counts:
        return []
    deadline = part["lease_deadline_ms"]
    out: list[QueueMessage] = []
    for header, batch in split_batches(part["records"]):
        if header.is_control:
            continue
        for record in decode_records(batch):
            count = counts.get(record.offset)
            if count is not None:
                out.append(
                    QueueMessage(
                        topic,
                        part["partition"],
                        record.offset,
                        record.value,
                        record.key,
                        _user_headers(record.headers) if record.headers else [],
                        record.timestamp,
                        count,
                        deadline,
                        group,
                    )
                )
    return out

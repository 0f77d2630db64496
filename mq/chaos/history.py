"""What a chaos run records: plain, JSON-able values the checker reads (no I/O here).

The workloads append to these while they run (one asyncio task per producer or
consumer, all on one event loop: appends need no lock); the checker only reads
them. Times are wall-clock seconds (``time.time()``) of this machine, the
same clock the brokers (on this machine) use for lease deadlines.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Acked:
    """A record whose produce (acks=all) succeeded: where the broker said it went."""

    value: str
    producer: int
    seq: int
    partition: int
    offset: int


@dataclass(frozen=True)
class Read:
    """A record read back at the end."""

    value: str
    partition: int
    offset: int


@dataclass
class LogHistory:
    """The log workload: every attempt, every acknowledgement, everything read back."""

    topic: str = ""
    attempted: set[str] = field(default_factory=set)
    """Every value a producer tried to send (acknowledged or not)."""
    acked: list[Acked] = field(default_factory=list)
    failed: int = 0
    """Sends that raised (they may or may not be in the log: neither is an anomaly)."""
    read: list[Read] = field(default_factory=list)
    end_offsets: dict[int, int] = field(default_factory=dict)
    """partition -> the end offset (high watermark) the final read reached."""


@dataclass(frozen=True)
class Delivery:
    """One message handed to one consumer by one receive call."""

    body: str
    partition: int
    offset: int
    delivery_count: int
    receipt: str
    consumer: int
    sent_at: float
    """When the receive call started."""
    got_at: float
    """When it returned."""
    lease_deadline: float
    """The broker's lease deadline (seconds); the lease began ``visibility`` before it."""


@dataclass(frozen=True)
class AckAttempt:
    """One ``ack()`` of one delivery: its receipt, when it started and ended, and whether
    it succeeded."""

    receipt: str
    started_at: float
    done_at: float
    ok: bool
    error: str = ""


@dataclass
class QueueHistory:
    """The queue workload: messages sent (acknowledged by the broker), deliveries, acks."""

    queue: str = ""
    visibility_s: float = 0.0
    sent: list[str] = field(default_factory=list)
    send_failed: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    acks: list[AckAttempt] = field(default_factory=list)


@dataclass
class ReplicaImages:
    """The batches of every replica of some partitions, up to each one's high watermark.

    ``images[(topic, partition)][node]`` is that replica's batches whose base
    offset is below the high watermark, back to back, as bytes.
    """

    high_watermarks: dict[tuple[str, int], int] = field(default_factory=dict)
    images: dict[tuple[str, int], dict[int, bytes]] = field(default_factory=dict)

"""Per-log settings, with Kafka's names and mq's defaults, checked once.

Flush policies and what they promise (a message is *acknowledged* when its
append's future completes):

``always``
    The writer syncs the data (fdatasync) before it acknowledges. An
    acknowledged message survives ``kill -9`` and a power cut. Appends that
    arrive during a sync share the next one (group commit).
``interval`` (default, ``flush.ms`` = 1000)
    Acknowledged once copied into the memory-mapped segment, which is the
    kernel's page cache: it survives ``kill -9`` of the broker. The writer
    syncs at most ``flush.ms`` after an append, so a power cut or kernel crash
    loses at most that window (as Redis ``appendfsync everysec``).
``never``
    Acknowledged once in the page cache, as ``interval``; the kernel writes it
    back when it likes (Kafka's default, relying on replication). Survives
    ``kill -9``; a power cut may lose whatever the kernel had not written.

Whatever the policy, a segment is synced when it is rolled, and on clean close.

Cleanup policies (``cleanup.policy``, as in Kafka): ``delete`` removes whole
old segments by ``retention.ms`` / ``retention.bytes``; ``compact`` keeps the
newest record of every key in the closed segments (see
:mod:`mq.storage.cleaner`) and ignores retention; ``compact,delete`` does both.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

from mq.config_values import parse_int, parse_ratio
from mq.errors import InvalidConfigError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

MAX_SEGMENT_BYTES = 2 * GiB - 1
"""Index entries keep file positions as u32; Kafka has the same ceiling."""
MIN_SEGMENT_BYTES = 64 * KiB
"""Smaller segments only multiply files; nothing useful fits in less."""
DAY_MS = 24 * 3600 * 1000
MAX_DECOMPRESSION_FACTOR = 64
"""Default ``max.decompression.factor``: a compressed batch's records may inflate to
this many times ``max.message.bytes`` at produce (64 MiB for the default 1 MiB, which
is also what a consumer accepts by default, ``DEFAULT_MAX_DECOMPRESSED``). Real record
data compresses 2-10x, highly repetitive data more; past this a batch is a
decompression bomb, refused before more memory is spent on it."""
UNLIMITED_AS_MINUS_ONE = frozenset({"retention_ms", "retention_bytes"})
"""Settings where, as in Kafka, ``-1`` means no limit (held as None; described as -1)."""
MAX_DURATION_MS = 1_000 * 365 * DAY_MS
"""Longest time setting (1,000 years, about 3.2e13 ms): past it a time is "never" in
all but name, and a millisecond timestamp plus it stays far inside int64, where
2^63 overflows every deadline computed from it."""
MAX_LOG_BYTES = 1 << 60
"""Largest size setting of a whole log (``retention.bytes``): an exbibyte."""
MAX_DECOMPRESSION_FACTOR_LIMIT = 1_024
"""Largest ``max.decompression.factor``: 1 GiB of records from a 1 MiB batch."""
TIMESTAMP_AFTER_MAX_MS = 3_600_000
"""Default ``message.timestamp.after.max.ms``: a produced batch may carry timestamps
at most an hour ahead of the broker's clock (Kafka's KIP-937 setting; Kafka 3.6 kept
Long.MAX by default, mq takes the bound that clock skew alone never reaches).
Time-based retention and lookups by time rely on timestamps being near the truth:
a record a thousand years ahead keeps its segment from ever expiring."""

INT_RANGES: dict[str, tuple[int, int]] = {
    "segment_bytes": (MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES),
    "segment_ms": (1, MAX_DURATION_MS),
    "retention_ms": (1, MAX_DURATION_MS),
    "retention_bytes": (1, MAX_LOG_BYTES),
    "index_interval_bytes": (1, MAX_SEGMENT_BYTES),
    "flush_ms": (1, MAX_DURATION_MS),
    "max_message_bytes": (1, MAX_SEGMENT_BYTES),
    "max_decompression_factor": (1, MAX_DECOMPRESSION_FACTOR_LIMIT),
    "min_compaction_lag_ms": (0, MAX_DURATION_MS),
    "delete_retention_ms": (0, MAX_DURATION_MS),
    "message_timestamp_after_max_ms": (0, MAX_DURATION_MS),
}
"""The range of every integer log setting (field name: inclusive bounds); the
``UNLIMITED_AS_MINUS_ONE`` ones also take -1."""


CLEANUP_POLICIES = {
    "delete": frozenset({"delete"}),
    "compact": frozenset({"compact"}),
    "compact,delete": frozenset({"compact", "delete"}),
    "delete,compact": frozenset({"compact", "delete"}),
}


class FlushPolicy(enum.Enum):
    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log (topic-level settings in the broker)."""

    segment_bytes: int = 1 * GiB
    """Roll to a new segment when the active one would grow past this."""
    segment_ms: int = 7 * DAY_MS
    """Roll a non-empty active segment at least this often (so retention can delete it)."""
    retention_ms: int | None = 14 * DAY_MS
    """Delete closed segments whose newest record is older than this (None: keep)."""
    retention_bytes: int | None = None
    """Delete the oldest closed segments while the log is bigger than this (None: no cap)."""
    index_interval_bytes: int = 4 * KiB
    """One sparse index entry per this many bytes of batches."""
    flush: FlushPolicy = FlushPolicy.INTERVAL
    flush_ms: int = 1000
    """With ``flush=interval``: the longest time between an append and its sync."""
    max_message_bytes: int = 1 * MiB + 12
    """Largest batch a producer may append (Kafka's ``max.message.bytes``)."""
    max_decompression_factor: int = MAX_DECOMPRESSION_FACTOR
    """A produced compressed batch may decompress to at most ``max.message.bytes`` times this."""
    cleanup_policy: str = "delete"
    """``delete``, ``compact`` or ``compact,delete`` (see the module docstring)."""
    min_cleanable_dirty_ratio: float = 0.5
    """Compact once the not yet compacted bytes are this share of the closed segments."""
    min_compaction_lag_ms: int = 0
    """A record stays uncompacted for at least this long (by its segment's newest timestamp)."""
    delete_retention_ms: int = DAY_MS
    """How long a compacted tombstone (null value) stays readable before it goes."""
    message_timestamp_after_max_ms: int = TIMESTAMP_AFTER_MAX_MS
    """How far ahead of the broker's clock a produced batch's timestamps may be (Kafka's
    ``message.timestamp.after.max.ms``; see :data:`TIMESTAMP_AFTER_MAX_MS`)."""

    def __post_init__(self) -> None:
        for name, (low, high) in INT_RANGES.items():
            value = getattr(self, name)
            if value is not None or name not in UNLIMITED_AS_MINUS_ONE:
                parse_int(name.replace("_", "."), value, low, high)
        if self.max_message_bytes > self.segment_bytes:
            raise InvalidConfigError("max.message.bytes cannot exceed segment.bytes")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise InvalidConfigError(
                f"cleanup.policy must be delete, compact or compact,delete, "
                f"not {self.cleanup_policy!r}"
            )
        parse_ratio("min.cleanable.dirty.ratio", self.min_cleanable_dirty_ratio)

    @property
    def max_decompressed_bytes(self) -> int:
        """The most a produced batch's records may decompress to (a decompression bomb's cap)."""
        return self.max_message_bytes * self.max_decompression_factor

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts this log."""
        return "compact" in CLEANUP_POLICIES[self.cleanup_policy]

    @property
    def delete(self) -> bool:
        """Whether retention deletes old segments of this log."""
        return "delete" in CLEANUP_POLICIES[self.cleanup_policy]

    def with_overrides(self, overrides: dict[str, Any]) -> LogConfig:
        """A copy with Kafka-style keys (``segment.bytes``, ``flush``…) applied."""
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            field = key.replace(".", "_")
            if field not in LogConfig.__dataclass_fields__:
                raise InvalidConfigError(f"unknown log setting {key!r}")
            if field == "flush":
                try:
                    value = FlushPolicy(value)
                except ValueError:
                    choices = ", ".join(p.value for p in FlushPolicy)
                    raise InvalidConfigError(f"flush must be one of {choices}") from None
            elif field == "cleanup_policy":
                value = str(value).replace(" ", "")
            elif field == "min_cleanable_dirty_ratio":
                value = parse_ratio(key, value)
            elif value is not None:
                low, high = INT_RANGES[field]
                unlimited = field in UNLIMITED_AS_MINUS_ONE
                value = parse_int(key, value, low, high, unlimited=unlimited)
                if unlimited and value == -1:
                    value = None  # Kafka's -1: no limit
            changes[field] = value
        return replace(self, **changes)

"""The options of the ``mq`` data source, parsed and checked once, on the driver.

Spark hands a data source its options as strings (case-insensitive names).
Each parser here turns them into a frozen dataclass, or raises
:class:`OptionError` naming the option and what it accepts, so that a typo
fails the query at planning time with a clear message instead of reading
the wrong thing. Pure: no Spark, no network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from spark_connector.exactly_once import MAX_READ_BACK_RECORDS
from spark_connector.kafka_names import READ_ALIASES, WRITE_ALIASES, OptionError, canonical
from spark_connector.security import Security, parse_security

__all__ = [
    "OptionError",
    "ReadOptions",
    "WriteOptions",
    "parse_read_options",
    "parse_write_options",
]

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9292"

EARLIEST: Final = -2
"""In offset JSON, as in Spark's Kafka source: the partition's log start."""
LATEST: Final = -1
"""In offset JSON: the partition's high watermark (its end for consumers)."""

Mode = Literal["batch", "stream"]
"""A batch read or a stream; ``load()`` (where the schema is resolved, before Spark
says which) checks the options as a batch's, :meth:`streamReader` again as a stream's."""

RETRY_TIMEOUT_MS: Final = 30_000
"""Default of ``retryTimeoutMs``: how long a reader (a task, or the driver planning a
micro-batch) retries retriable errors (a broker restarting, a leader moving) before
failing. A restart takes a few seconds, a failover the broker session timeout (6 s by
default) plus an election: 30 s covers both with room, and still fails a query whose
cluster is really gone within half a minute instead of hanging."""

_COMMON: Final = {"bootstrap", "topic", "failondataloss", "polltimeoutms", "requesttimeoutms"}
_READ: Final = _COMMON | {
    "subscribepattern",
    "assign",
    "startingoffsets",
    "startingoffsetsbytimestamp",
    "startingtimestamp",
    "startingoffsetsbytimestampstrategy",
    "minpartitions",
    "maxrecordsperpartition",
    "includeheaders",
    "retrytimeoutms",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
}
_ENDING: Final = {"endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp"}
_BATCH_READ: Final = _READ | _ENDING
"""A batch read accepts the stream-only ``maxOffsetsPerTrigger`` (and the other trigger
options) and ignores them, as Spark's Kafka source does."""
_WRITE: Final = {
    "bootstrap",
    "topic",
    "requesttimeoutms",
    "lingerms",
    "batchsize",
    "compression",
    "includeheaders",
    "resumemaxrecords",
}
_IGNORED: Final = {"path", "checkpointlocation", "queryname"}
"""Spark's own options, which it passes on too: ``load(path)``/``save(path)``
(a topic is not a path), a streaming query's checkpoint and name."""
_SUBSCRIPTIONS: Final = ("subscribe", "subscribePattern", "assign")

MAX_TRIGGER_DELAY_MS: Final = 15 * 60 * 1000
"""Default of ``maxTriggerDelay`` (Kafka's): how long ``minOffsetsPerTrigger`` may hold
a micro-batch back while some records wait."""


OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[int, int]]
"""``earliest``, ``latest``, or offsets per topic and partition (-2 earliest, -1 latest)."""
TimeSpec = int | dict[str, dict[int, int]]
"""A timestamp (ms) for every partition, or one per topic and partition."""


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    topics: tuple[str, ...]
    """``subscribe``'s topics, or those ``assign`` names; empty with ``subscribePattern``."""
    starting: OffsetSpec
    ending: OffsetSpec
    min_partitions: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    poll_timeout_ms: int
    request_timeout_ms: int
    include_headers: bool = False
    """Whether rows have a ``headers`` column (as Kafka's ``includeHeaders``)."""
    retry_timeout_ms: int = RETRY_TIMEOUT_MS
    """How long retriable errors are retried (:mod:`spark_connector.retry`)."""
    pattern: str | None = None
    """``subscribePattern``: every topic whose whole name matches (new ones too, in streams)."""
    assigned: tuple[tuple[str, int], ...] | None = None
    """``assign``: exactly these partitions."""
    starting_by_time: TimeSpec | None = None
    """``startingTimestamp`` or ``startingOffsetsByTimestamp`` (they win over startingOffsets)."""
    ending_by_time: TimeSpec | None = None
    timestamp_strategy: Literal["error", "latest"] = "error"
    """``startingOffsetsByTimestampStrategy``: when no record is that recent, fail or
    start at the partition's end."""
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = MAX_TRIGGER_DELAY_MS
    max_records_per_partition: int | None = None
    security: Security = field(default_factory=Security)

    @property
    def subscription(self) -> str:
        """What the query reads, for messages."""
        if self.pattern is not None:
            return f"topics matching {self.pattern!r}"
        return ", ".join(self.topics)


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None
    request_timeout_ms: int
    linger_ms: int
    batch_size: int
    compression: str | None
    security: Security = field(default_factory=Security)
    resume_max_records: int = MAX_READ_BACK_RECORDS
    """How many records a retried task may read back (:mod:`spark_connector.exactly_once`)."""


def parse_read_options(options: Mapping[str, str], mode: Mode) -> ReadOptions:
    """The reader's options for a batch (``spark.read``) or streaming query."""
    opts = canonical(options, _BATCH_READ, READ_ALIASES, "read", _IGNORED)
    if mode == "stream":
        for name in sorted(_ENDING & set(opts)):
            spelled = {"endingoffsets": "endingOffsets"}.get(name, name)
            raise OptionError(f"{spelled} is for batch reads: a stream has no end")
    topics, pattern, assigned = _subscription(opts)
    starting = _offsets(opts, "startingOffsets", "earliest" if mode == "batch" else "latest")
    ending: OffsetSpec = "latest"
    if mode == "batch":
        ending = _offsets(opts, "endingOffsets", "latest")
        if ending == "earliest":
            raise OptionError("endingOffsets cannot be 'earliest': use 'latest' or offset JSON")
        if isinstance(ending, dict) and EARLIEST in _all_offsets(ending):
            raise OptionError("endingOffsets cannot name -2 (earliest) for a partition")
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if isinstance(spec, dict):
            _check_named_topics(name, spec, topics, pattern)
    starting_by_time = _timestamps(opts, "startingTimestamp", "startingOffsetsByTimestamp")
    ending_by_time = _timestamps(opts, "endingTimestamp", "endingOffsetsByTimestamp")
    for name, by_time in (
        ("startingOffsetsByTimestamp", starting_by_time),
        ("endingOffsetsByTimestamp", ending_by_time),
    ):
        if isinstance(by_time, dict):
            _check_named_topics(name, by_time, topics, pattern)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"startingOffsetsByTimestampStrategy is 'error' or 'latest', not {strategy!r}"
        )
    max_per_trigger = _positive(opts, "maxOffsetsPerTrigger")  # checked, even where ignored
    min_per_trigger = _positive(opts, "minOffsetsPerTrigger")
    if max_per_trigger and min_per_trigger and min_per_trigger > max_per_trigger:
        raise OptionError(
            f"minOffsetsPerTrigger {min_per_trigger} is above maxOffsetsPerTrigger "
            f"{max_per_trigger}: no micro-batch could satisfy both"
        )
    delay = opts.get("maxtriggerdelay")
    return ReadOptions(
        bootstrap=_bootstrap(opts),
        topics=topics,
        starting=starting,
        ending=ending,
        min_partitions=_positive(opts, "minPartitions"),
        max_offsets_per_trigger=max_per_trigger if mode == "stream" else None,
        fail_on_data_loss=_boolean(opts, "failOnDataLoss", True),
        poll_timeout_ms=_positive(opts, "pollTimeoutMs") or 120_000,
        request_timeout_ms=_positive(opts, "requestTimeoutMs") or 30_000,
        include_headers=_boolean(opts, "includeHeaders", False),
        retry_timeout_ms=_positive(opts, "retryTimeoutMs") or RETRY_TIMEOUT_MS,
        pattern=pattern,
        assigned=assigned,
        starting_by_time=starting_by_time,
        ending_by_time=ending_by_time if mode == "batch" else None,
        timestamp_strategy="latest" if strategy == "latest" else "error",
        min_offsets_per_trigger=min_per_trigger if mode == "stream" else None,
        max_trigger_delay_ms=MAX_TRIGGER_DELAY_MS
        if delay is None
        else duration_ms(delay, "maxTriggerDelay"),
        max_records_per_partition=_positive(opts, "maxRecordsPerPartition"),
        security=parse_security(opts),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """The writer's options; ``topic`` may instead come from a ``topic`` column."""
    opts = canonical(options, _WRITE, WRITE_ALIASES, "write", _IGNORED)
    topic = opts.get("topic")
    if topic is not None and (not topic.strip() or "," in topic):
        raise OptionError(f"topic for writing is one topic name, not {topic!r}")
    compression = opts.get("compression")
    if compression == "none":  # Kafka's name for no compression
        compression = None
    if compression is not None and compression not in ("gzip", "snappy", "lz4", "zstd"):
        raise OptionError(f"compression is gzip, snappy, lz4 or zstd, not {compression!r}")
    linger = opts.get("lingerms", "5")
    if not linger.isdigit():
        raise OptionError(f"lingerMs is a whole number of milliseconds >= 0, not {linger!r}")
    _boolean(opts, "includeHeaders", False)  # checked; a headers column is always written
    return WriteOptions(
        bootstrap=_bootstrap(opts),
        topic=topic.strip() if topic else None,
        request_timeout_ms=_positive(opts, "requestTimeoutMs") or 30_000,
        linger_ms=int(linger),
        batch_size=_positive(opts, "batchSize") or 256 * 1024,
        compression=compression,
        security=parse_security(opts),
        resume_max_records=_positive(opts, "resumeMaxRecords") or MAX_READ_BACK_RECORDS,
    )


def _bootstrap(opts: Mapping[str, str]) -> str:
    raw = opts.get("bootstrap", DEFAULT_BOOTSTRAP)
    if not raw.strip() or any(not part.strip() for part in raw.split(",")):
        raise OptionError(
            f"kafka.bootstrap.servers (bootstrap) is host:port[,host:port...], not {raw!r}"
        )
    return raw


def _subscription(
    opts: Mapping[str, str],
) -> tuple[tuple[str, ...], str | None, tuple[tuple[str, int], ...] | None]:
    """(topics, pattern, assigned partitions): exactly one of subscribe (``topic``),
    subscribePattern and assign, as in Kafka's source."""
    given = [
        name
        for name, key in zip(_SUBSCRIPTIONS, ("topic", "subscribepattern", "assign"), strict=True)
        if key in opts
    ]
    if len(given) > 1:
        raise OptionError(
            f"options {' and '.join(repr(n) for n in given)} both say what to read: "
            f"give only one of {', '.join(_SUBSCRIPTIONS)} (subscribe's mq alias is 'topic')"
        )
    if not given:
        raise OptionError(
            "option 'subscribe' (mq alias 'topic') is required: a topic name or a "
            "comma-separated list; or 'subscribePattern' (a regex) or 'assign' (JSON)"
        )
    if "subscribepattern" in opts:
        raw = opts["subscribepattern"]
        if not raw.strip():
            raise OptionError("subscribePattern is empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(
                f"subscribePattern {raw!r} is not a regular expression: {exc}"
            ) from None
        return (), raw, None
    if "assign" in opts:
        assigned = _assign(opts["assign"])
        return tuple(dict.fromkeys(t for t, _ in assigned)), None, assigned
    raw = opts["topic"]
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",")))
    if not topics or any(not t for t in topics):
        raise OptionError(f"option 'subscribe' (or 'topic') has an empty name: {raw!r}")
    return topics, None, None


def _assign(raw: str) -> tuple[tuple[str, int], ...]:
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(
            f'assign is JSON such as {{"topicA": [0, 1], "topicB": [2]}}, not {raw!r}'
        )
    out: list[tuple[str, int]] = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise OptionError(f"assign: topic {topic!r} must map to a list of partition numbers")
        out += [(str(topic), p) for p in partitions]
    if not out:
        raise OptionError("assign names no partition")
    return tuple(dict.fromkeys(out))


def _offsets(opts: Mapping[str, str], name: str, default: str) -> OffsetSpec:
    raw = opts.get(name.lower(), default).strip()
    if raw in ("earliest", "latest"):
        return raw  # type: ignore[return-value]
    try:
        parsed = json.loads(raw)
    except ValueError:
        raise OptionError(
            f"{name} is 'earliest', 'latest' or JSON such as "
            f'{{"topic": {{"0": 23, "1": -2}}}} (-2 earliest, -1 latest), not {raw!r}'
        ) from None
    return parse_offset_json(parsed, name)


def _timestamps(opts: Mapping[str, str], one: str, per_partition: str) -> TimeSpec | None:
    """``startingTimestamp`` (one time for every partition) wins over
    ``startingOffsetsByTimestamp`` (JSON per partition), as in Kafka's source."""
    raw = opts.get(one.lower())
    if raw is not None:
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise OptionError(f"{one} is a time in ms since the epoch (>= 0), not {raw!r}")
        return value
    raw = opts.get(per_partition.lower())
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        raise OptionError(
            f'{per_partition} is JSON such as {{"topic": {{"0": 1700000000000}}}}, not {raw!r}'
        ) from None
    spec = parse_offset_json(parsed, per_partition)
    if any(stamp < 0 for stamp in _all_offsets(spec)):
        raise OptionError(f"{per_partition}: a timestamp is negative")
    return spec


_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(raw: str, name: str) -> int:
    """Spark's time strings: ``500ms``, ``30s``, ``15m``, ``1h``, ``2d``; a bare number is ms."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if match is None or match.group(2) not in ("", *_UNITS):
        raise OptionError(f"{name} is a duration such as 500ms, 30s, 15m or 1h, not {raw!r}")
    return int(match.group(1)) * _UNITS.get(match.group(2), 1)


def parse_offset_json(parsed: object, name: str) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 23}}`` (Kafka's format) as ``{"topic": {0: 23}}``, checked."""
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"{name} JSON must be an object of topics, not {parsed!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"{name}: topic {topic!r} must map partitions to offsets")
        offsets: dict[int, int] = {}
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                raise OptionError(f"{name}: {partition!r} is not a partition number") from None
            if number < 0:
                raise OptionError(f"{name}: partition {number} is negative")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise OptionError(
                    f"{name}: offset {offset!r} of {topic}-{number} is not an offset, "
                    "-1 (latest) or -2 (earliest)"
                )
            offsets[number] = offset
        out[str(topic)] = offsets
    return out


def _all_offsets(spec: dict[str, dict[int, int]]) -> list[int]:
    return [offset for partitions in spec.values() for offset in partitions.values()]


def _check_named_topics(
    name: str, spec: dict[str, dict[int, int]], topics: tuple[str, ...], pattern: str | None
) -> None:
    if pattern is not None:
        unmatched = sorted(t for t in spec if not re.fullmatch(pattern, t))
        if unmatched:
            raise OptionError(
                f"{name} names topic(s) {unmatched} that subscribePattern does not match"
            )
        return
    extra = sorted(set(spec) - set(topics))
    if extra:
        raise OptionError(
            f"{name} names topic(s) {extra} that option 'subscribe'/'topic'/'assign' does not"
        )


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(f"{name} is a whole number > 0, not {raw!r}")
    return value


def _boolean(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"{name} is true or false, not {raw!r}")

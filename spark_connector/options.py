"""The options of the ``mq`` data source, parsed and checked once, on the driver.

Spark hands a data source its options as strings (case-insensitive names).
Each parser here turns them into a frozen dataclass, or raises
:class:`OptionError` naming the option and what it accepts, so that a typo
fails the query at planning time with a clear message instead of reading
the wrong thing. Pure: no Spark, no network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

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
    "startingoffsets",
    "minpartitions",
    "includeheaders",
    "retrytimeoutms",
    "maxoffsetspertrigger",
}
_BATCH_READ: Final = _READ | {"endingoffsets"}
"""A batch read accepts the stream-only ``maxOffsetsPerTrigger`` and ignores it, as
Spark's Kafka source does."""
_STREAM_READ: Final = _READ
_WRITE: Final = {"bootstrap", "topic", "requesttimeoutms", "lingerms", "batchsize", "compression"}
_IGNORED: Final = {"path", "checkpointlocation", "queryname"}
"""Spark's own options, which it passes on too: ``load(path)``/``save(path)``
(a topic is not a path), a streaming query's checkpoint and name."""


class OptionError(ValueError):
    """An option of the ``mq`` data source is missing, unknown or malformed."""


OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[int, int]]
"""``earliest``, ``latest``, or offsets per topic and partition (-2 earliest, -1 latest)."""


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    topics: tuple[str, ...]
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


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None
    request_timeout_ms: int
    linger_ms: int
    batch_size: int
    compression: str | None


def parse_read_options(options: Mapping[str, str], mode: Mode) -> ReadOptions:
    """The reader's options for a batch (``spark.read``) or streaming query."""
    lowered = {str(name).lower() for name in options}
    if mode == "stream" and "endingoffsets" in lowered:
        raise OptionError("endingOffsets is for batch reads: a stream has no end")
    opts = _lowered(options, _BATCH_READ if mode == "batch" else _STREAM_READ, "read")
    topics = _topics(opts)
    starting = _offsets(opts, "startingOffsets", "earliest" if mode == "batch" else "latest")
    ending: OffsetSpec = "latest"
    if mode == "batch":
        ending = _offsets(opts, "endingOffsets", "latest")
        if ending == "earliest":
            raise OptionError("endingOffsets cannot be 'earliest': use 'latest' or offset JSON")
        if isinstance(ending, dict) and EARLIEST in _all_offsets(ending):
            raise OptionError("endingOffsets cannot name -2 (earliest) for a partition")
        _check_named_topics("endingOffsets", ending, topics)
    if starting != "earliest" and isinstance(starting, dict):
        _check_named_topics("startingOffsets", starting, topics)
    max_per_trigger = _positive(opts, "maxOffsetsPerTrigger")  # checked, even where ignored
    return ReadOptions(
        bootstrap=opts.get("bootstrap", DEFAULT_BOOTSTRAP),
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
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """The writer's options; ``topic`` may instead come from a ``topic`` column."""
    opts = _lowered(options, _WRITE, "write")
    topic = opts.get("topic")
    if topic is not None and (not topic.strip() or "," in topic):
        raise OptionError(f"topic for writing is one topic name, not {topic!r}")
    compression = opts.get("compression")
    if compression is not None and compression not in ("gzip", "snappy", "lz4", "zstd"):
        raise OptionError(f"compression is gzip, snappy, lz4 or zstd, not {compression!r}")
    linger = opts.get("lingerms", "5")
    if not linger.isdigit():
        raise OptionError(f"lingerMs is a whole number of milliseconds >= 0, not {linger!r}")
    return WriteOptions(
        bootstrap=opts.get("bootstrap", DEFAULT_BOOTSTRAP),
        topic=topic.strip() if topic else None,
        request_timeout_ms=_positive(opts, "requestTimeoutMs") or 30_000,
        linger_ms=int(linger),
        batch_size=_positive(opts, "batchSize") or 256 * 1024,
        compression=compression,
    )


def _lowered(options: Mapping[str, str], known: set[str], mode: str) -> dict[str, str]:
    opts = {str(name).lower(): str(value) for name, value in options.items()}
    unknown = sorted(set(opts) - known - _IGNORED)
    if unknown:
        allowed = ", ".join(sorted(known))
        raise OptionError(
            f"unknown option(s) {', '.join(unknown)} for an mq {mode}; "
            f"the options are (any case): {allowed}"
        )
    return opts


def _topics(opts: Mapping[str, str]) -> tuple[str, ...]:
    raw = opts.get("topic")
    if raw is None:
        raise OptionError("option 'topic' is required: a topic name or a comma-separated list")
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",")))
    if not topics or any(not t for t in topics):
        raise OptionError(f"option 'topic' has an empty name: {raw!r}")
    return topics


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


def _check_named_topics(name: str, spec: OffsetSpec, topics: tuple[str, ...]) -> None:
    if isinstance(spec, dict):
        extra = sorted(set(spec) - set(topics))
        if extra:
            raise OptionError(f"{name} names topic(s) {extra} that option 'topic' does not")


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

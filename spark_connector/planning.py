"""What a read covers: the partitions it subscribes to and where it starts and ends.

Asked of the cluster on the driver (batch planning, a stream's first and every
later micro-batch), through a :class:`~mq.client.sync.SyncAdmin`:

* :func:`subscribed_partitions`: ``subscribe``'s topics, the topics whose whole
  name matches ``subscribePattern`` now (a stream asks at every micro-batch, so
  it picks up new matching topics), or ``assign``'s partitions;
* :func:`start_offsets` / :func:`end_offsets`: ``startingOffsets`` /
  ``endingOffsets``, or, when given (they win, as in Kafka's source),
  ``startingTimestamp`` / ``startingOffsetsByTimestamp`` and their ``ending``
  twins, looked up with mq's list_offsets by timestamp: the first offset whose
  record's timestamp is at or after the time. A partition with no record that
  recent starts per ``startingOffsetsByTimestampStrategy`` (``error``: fail
  naming it; ``latest``: at its end) and ends at its end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mq.client.sync import SyncAdmin
from mq.client.types import TopicPartition
from mq.errors import UnknownTopicOrPartitionError
from spark_connector.options import OptionError, ReadOptions, TimeSpec
from spark_connector.ranges import Partitioned, resolve


def existing_partitions(
    admin: SyncAdmin, topics: tuple[str, ...]
) -> tuple[list[tuple[str, int]], list[str]]:
    """Every partition of the topics of ``topics`` that exist, and the names of those
    that do not.

    A listing leaves out the topics the principal may not DESCRIBE, so a topic
    missing from it is asked for by name: the broker's refusal
    (TopicAuthorizationFailedError, naming the principal and the topic) is raised
    rather than calling the topic missing."""
    known = set(admin.list_topics())
    missing = [t for t in topics if t not in known]
    for topic in missing:
        _raise_if_refused(admin, topic)
    return [
        (tp.topic, tp.partition) for t in topics if t in known for tp in admin.topic_partitions(t)
    ], missing


def _raise_if_refused(admin: SyncAdmin, topic: str) -> None:
    """The broker's error for ``topic`` when it is not merely unknown (an
    authorization refusal; a retriable one, such as a leader not elected yet, is
    retried by the caller)."""
    try:
        admin.describe_topic(topic)
    except UnknownTopicOrPartitionError:
        return


def subscribed_partitions(
    admin: SyncAdmin, options: ReadOptions
) -> tuple[list[tuple[str, int]], list[str]]:
    """The partitions the read covers now, and the subscribed/assigned topics that do
    not exist (none for a pattern: it matches what exists)."""
    if options.pattern is not None:
        pattern = re.compile(options.pattern)
        matching = tuple(sorted(t for t in admin.list_topics() if pattern.fullmatch(t)))
        return existing_partitions(admin, matching)[0], []
    if options.assigned is None:
        return existing_partitions(admin, options.topics)
    have, missing = existing_partitions(admin, options.topics)
    present = set(have)
    absent = [f"{t}-{p}" for t, p in options.assigned if t not in missing and (t, p) not in present]
    if absent:
        raise OptionError(f"assign names partition(s) {absent} that do not exist")
    return [tp for tp in options.assigned if tp in present], missing


def list_offsets(
    admin: SyncAdmin, partitions: list[tuple[str, int]]
) -> tuple[Partitioned, Partitioned]:
    """(log start, high watermark) of every partition."""
    tps = [TopicPartition(t, p) for t, p in partitions]
    earliest = admin.list_offsets(tps, "earliest")
    latest = admin.list_offsets(tps, "latest")
    return (
        {(tp.topic, tp.partition): o for tp, o in earliest.items()},
        {(tp.topic, tp.partition): o for tp, o in latest.items()},
    )


def start_offsets(
    admin: SyncAdmin,
    options: ReadOptions,
    partitions: list[tuple[str, int]],
    earliest: Mapping[tuple[str, int], int],
    latest: Mapping[tuple[str, int], int],
    default: str,
) -> Partitioned:
    """Where the read starts in each partition."""
    if options.starting_by_time is None:
        return resolve(options.starting, partitions, earliest, latest, default)
    name = (
        "startingTimestamp"
        if isinstance(options.starting_by_time, int)
        else "startingOffsetsByTimestamp"
    )
    found = by_timestamp(admin, options.starting_by_time, partitions, name)
    out: Partitioned = {}
    for tp, (stamp, offset) in sorted(found.items()):
        if offset < 0:
            if options.timestamp_strategy == "error":
                raise OptionError(
                    f"{name}: {tp[0]}-{tp[1]} has no record at or after {stamp}; set "
                    "startingOffsetsByTimestampStrategy=latest to start there at its end"
                )
            offset = latest[tp]
        out[tp] = offset
    return out


def end_offsets(
    admin: SyncAdmin,
    options: ReadOptions,
    partitions: list[tuple[str, int]],
    earliest: Mapping[tuple[str, int], int],
    latest: Mapping[tuple[str, int], int],
) -> Partitioned:
    """Where a batch read ends in each partition (exclusive)."""
    if options.ending_by_time is None:
        return resolve(options.ending, partitions, earliest, latest, "latest")
    name = (
        "endingTimestamp" if isinstance(options.ending_by_time, int) else "endingOffsetsByTimestamp"
    )
    found = by_timestamp(admin, options.ending_by_time, partitions, name)
    return {tp: latest[tp] if offset < 0 else offset for tp, (_, offset) in found.items()}


def by_timestamp(
    admin: SyncAdmin, spec: TimeSpec, partitions: list[tuple[str, int]], name: str
) -> dict[tuple[str, int], tuple[int, int]]:
    """(timestamp, first offset at or after it, -1 if none) of each partition.

    A per-partition spec must name every partition read, as Kafka's source requires."""
    if isinstance(spec, int):
        stamps = dict.fromkeys(partitions, spec)
    else:
        named = {(t, p): s for t, parts in spec.items() for p, s in parts.items()}
        unknown = sorted(set(named) - set(partitions))
        if unknown:
            raise OptionError(f"{name} names partitions {unknown} that the read does not cover")
        uncovered = sorted(set(partitions) - set(named))
        if uncovered:
            raise OptionError(
                f"{name} gives no timestamp for {uncovered}: name every partition "
                "(or give one startingTimestamp/endingTimestamp for all)"
            )
        stamps = named
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for stamp in sorted(set(stamps.values())):
        tps = [TopicPartition(t, p) for (t, p), s in stamps.items() if s == stamp]
        for tp, offset in admin.list_offsets(tps, stamp).items():
            out[(tp.topic, tp.partition)] = (stamp, offset)
    return out

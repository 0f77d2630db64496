"""Offsets per partition, and the offset ranges Spark reads as tasks. Pure.

An :class:`OffsetRange` is one Spark input partition: the records of one
topic-partition with ``start <= offset < end``. :func:`plan` turns start and
end offsets into ranges, splitting big partitions when ``minPartitions`` asks
for more tasks than there are topic-partitions (as Spark's Kafka source
does). :func:`rate_limit` spreads ``maxOffsetsPerTrigger`` over partitions in
proportion to what each has waiting. Streaming offsets travel through Spark's
checkpoints as ``{"topic": {"0": 12}}``: :func:`to_json_dict` / :func:`from_json_dict`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from typing import NamedTuple

from spark_connector.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    parse_offset_json,
)

Partitioned = dict[tuple[str, int], int]
"""An offset per (topic, partition)."""


class OffsetRange(NamedTuple):
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def resolve(
    spec: OffsetSpec,
    partitions: list[tuple[str, int]],
    earliest: Mapping[tuple[str, int], int],
    latest: Mapping[tuple[str, int], int],
    default: str,
) -> Partitioned:
    """Offsets of ``partitions`` for ``earliest``/``latest``/JSON; a partition the JSON
    does not name takes ``default``. An explicit offset outside the log is kept: reading
    it is what reports the data loss (or skips it, with ``failOnDataLoss=false``)."""
    out: Partitioned = {}
    named = spec if isinstance(spec, dict) else {}
    for tp in partitions:
        topic, partition = tp
        wanted = named.get(topic, {}).get(partition)
        if wanted is None:
            named_as = spec if isinstance(spec, str) else default
            wanted = EARLIEST if named_as == "earliest" else LATEST
        out[tp] = earliest[tp] if wanted == EARLIEST else latest[tp] if wanted == LATEST else wanted
    known = set(partitions)
    for topic, offsets in named.items():
        missing = sorted(p for p in offsets if (topic, p) not in known)
        if missing:
            raise OptionError(f"offsets name partitions {missing} that {topic!r} does not have")
    return out


def plan(
    start: Partitioned,
    end: Partitioned,
    min_partitions: int | None,
    max_records: int | None = None,
) -> list[OffsetRange]:
    """The ranges between ``start`` and ``end`` (empty ones left out); with
    ``max_records`` (``maxRecordsPerPartition``) none holds more records (each range
    is cut into equal pieces); with ``min_partitions`` above their number, the
    biggest are split into equal pieces until there are that many (or every piece
    is one record)."""
    ranges = [
        OffsetRange(topic, partition, offset, end[(topic, partition)])
        for (topic, partition), offset in sorted(start.items())
        if (topic, partition) in end and end[(topic, partition)] > offset
    ]
    if max_records is not None:
        ranges = [piece for r in ranges for piece in _cut(r, -(-r.size // max_records))]
    if min_partitions is None or min_partitions <= len(ranges):
        return ranges
    pieces = [1] * len(ranges)
    # give one more piece, each time, to the range whose pieces are biggest
    biggest: list[tuple[float, int]] = [(-r.size, i) for i, r in enumerate(ranges)]
    heapq.heapify(biggest)
    for _ in range(min_partitions - len(ranges)):
        while biggest and pieces[biggest[0][1]] >= ranges[biggest[0][1]].size:
            heapq.heappop(biggest)  # one record per piece already: it cannot split further
        if not biggest:
            break
        _, i = heapq.heappop(biggest)
        pieces[i] += 1
        heapq.heappush(biggest, (-(ranges[i].size / pieces[i]), i))
    return [piece for r, n in zip(ranges, pieces, strict=True) for piece in _cut(r, n)]


def _cut(r: OffsetRange, n: int) -> list[OffsetRange]:
    """``r`` in ``n`` pieces of equal size (give or take one record)."""
    bounds = [r.start + r.size * k // n for k in range(n + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds)]


def rate_limit(start: Partitioned, latest: Partitioned, max_rows: int) -> Partitioned:
    """End offsets that take at most ``max_rows`` records in all, each partition's
    share in proportion to its backlog (largest remainders get the odd records)."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: max_rows * lag // total for tp, lag in backlog.items()}
    spare = max_rows - sum(shares.values())
    remainders = heapq.nlargest(
        spare, backlog, key=lambda tp: ((max_rows * backlog[tp]) % total, tp)
    )
    for tp in remainders:
        shares[tp] += 1
    return {tp: start.get(tp, latest[tp]) + shares[tp] for tp in latest}


def to_json_dict(offsets: Partitioned) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json_dict(value: Mapping[str, object]) -> Partitioned:
    parsed = parse_offset_json(dict(value), "a checkpointed offset")
    return {(t, p): o for t, parts in parsed.items() for p, o in parts.items()}

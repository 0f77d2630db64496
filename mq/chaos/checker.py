"""The history checker: pure functions from a run's history to its anomalies.

Log (acks=all, idempotent producers, one value per send, unique values):

* **lost**: an acknowledged value is not in the log read back;
* **moved**: it is there, but not at the partition and offset the ack gave;
* **duplicated**: a value is in the log more than once;
* **reordered**: two acknowledged values of one producer in one partition
  sit in the log (where their acks said) in the opposite order of their sends;
* **phantom**: the log holds a value nobody sent.

Queue (a share group; consumers receive, and ack most deliveries):

* **lost**: a message whose send was acknowledged was never delivered;
* **redelivered after ack**: a message was leased again after an ``ack()``
  of it had returned successfully;
* **double lease**: two deliveries of one message whose leases overlap. A
  lease runs from its grant (the broker's deadline minus the visibility
  timeout) to its deadline, or to the start of the first ack of it (an ack
  may take effect even if it reports an error): a lease granted inside
  another one, by more than :data:`LEASE_MARGIN_S`, is an anomaly.

Replicas: the batches of every replica of a partition up to its high
watermark must be byte-identical (**diverged**).

Nothing here does I/O; :mod:`mq.chaos.planted` proves these checks on every
run by planting one anomaly of each kind in copies of the real history.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from mq.chaos.history import Acked, Delivery, LogHistory, QueueHistory, ReplicaImages

LEASE_MARGIN_S = 0.25
"""Slack when comparing lease intervals and ack times: the broker rounds deadlines
to milliseconds and the client takes its timestamps a little before or after the
broker acts; an overlap shorter than this is not called an anomaly."""
MAX_EXAMPLES = 20
"""Examples of each anomaly kept in a result (the counts are exact): enough to
debug, and a badly broken run does not write megabytes of JSON."""

KINDS = (
    "lost",
    "moved",
    "duplicated",
    "reordered",
    "phantom",
    "queue_lost",
    "redelivered_after_ack",
    "double_leases",
    "diverged_replicas",
)
"""Every kind of anomaly, in the order the results list them."""


@dataclass
class Anomalies:
    """Counts of each kind of anomaly, with a few examples of each."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})

    def add(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append(example)

    def merge(self, other: Anomalies) -> None:
        for kind in KINDS:
            self.counts[kind] += other.counts[kind]
            room = MAX_EXAMPLES - len(self.examples[kind])
            self.examples[kind] += other.examples[kind][: max(room, 0)]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- log ------------------------------------------------------------------------------------


def check_log(history: LogHistory) -> Anomalies:
    """Lost, moved, duplicated, reordered and phantom records of the log workload."""
    found = Anomalies()
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for record in history.read:
        where[record.value].append((record.partition, record.offset))
    for value, places in where.items():
        if len(places) > 1:
            found.add("duplicated", f"{value} at {sorted(places)}")
        if value not in history.attempted:
            found.add("phantom", f"{value} at {places[0]}, never sent")
    by_source: dict[tuple[int, int], list[Acked]] = defaultdict(list)
    for ack in history.acked:
        found_at = where.get(ack.value)
        if not found_at:
            found.add("lost", f"{ack.value} acked at {ack.partition}/{ack.offset}")
            continue
        if (ack.partition, ack.offset) not in found_at:
            found.add("moved", f"{ack.value} acked at {ack.partition}/{ack.offset}, in {found_at}")
            continue  # counted once, as moved
        by_source[(ack.producer, ack.partition)].append(ack)
    for (producer, partition), acks in by_source.items():
        acks.sort(key=lambda a: a.seq)
        last: Acked | None = None
        for ack in acks:
            if last is not None and ack.offset <= last.offset:
                found.add(
                    "reordered",
                    f"producer {producer} partition {partition}: seq {ack.seq} at offset "
                    f"{ack.offset}, not after seq {last.seq} at {last.offset}",
                )
            last = ack
    return found


# -- queue ----------------------------------------------------------------------------------


def _lease_ends(history: QueueHistory) -> tuple[dict[str, float], dict[str, float]]:
    """receipt -> when its first ack started; receipt -> when its first successful ack
    returned."""
    first_try: dict[str, float] = {}
    acked: dict[str, float] = {}
    for attempt in history.acks:
        if attempt.started_at < first_try.get(attempt.receipt, float("inf")):
            first_try[attempt.receipt] = attempt.started_at
        if attempt.ok and attempt.done_at < acked.get(attempt.receipt, float("inf")):
            acked[attempt.receipt] = attempt.done_at
    return first_try, acked


def check_queue(history: QueueHistory) -> Anomalies:
    """Lost messages, redeliveries after a successful ack and overlapping leases."""
    found = Anomalies()
    by_body: dict[str, list[Delivery]] = defaultdict(list)
    for delivery in history.deliveries:
        by_body[delivery.body].append(delivery)
    for body in history.sent:
        if body not in by_body:
            found.add("queue_lost", f"{body} sent, never delivered")
    first_try, acked = _lease_ends(history)
    visibility = history.visibility_s
    for body, deliveries in by_body.items():
        deliveries.sort(key=lambda d: d.lease_deadline)
        grants = [d.lease_deadline - visibility for d in deliveries]
        for i, earlier in enumerate(deliveries):
            end = min(earlier.lease_deadline, first_try.get(earlier.receipt, float("inf")))
            acked_at = acked.get(earlier.receipt)
            for later, granted in zip(deliveries[i + 1 :], grants[i + 1 :], strict=True):
                if later.receipt == earlier.receipt:
                    continue  # the same delivery reported twice is not a second lease
                if acked_at is not None and granted > acked_at + LEASE_MARGIN_S:
                    found.add(
                        "redelivered_after_ack",
                        f"{body}: {earlier.receipt} acked at {acked_at:.3f}, leased again "
                        f"as {later.receipt} at {granted:.3f} to consumer {later.consumer}",
                    )
                    break
                if grants[i] - LEASE_MARGIN_S <= granted < end - LEASE_MARGIN_S:
                    found.add(
                        "double_leases",
                        f"{body}: {earlier.receipt} (consumer {earlier.consumer}, lease "
                        f"{grants[i]:.3f}-{end:.3f}) and {later.receipt} (consumer "
                        f"{later.consumer}, granted {granted:.3f})",
                    )
    return found


# -- replicas -------------------------------------------------------------------------------


def check_replicas(replicas: ReplicaImages) -> Anomalies:
    """Partitions whose replicas are not byte-identical up to the high watermark."""
    found = Anomalies()
    for (topic, partition), images in sorted(replicas.images.items()):
        distinct = {image for image in images.values()}
        if len(distinct) > 1:
            sizes = {node: len(image) for node, image in sorted(images.items())}
            found.add(
                "diverged_replicas",
                f"{topic}-{partition}: replicas differ below the high watermark "
                f"{replicas.high_watermarks.get((topic, partition))} (bytes per node {sizes}, "
                f"first difference at byte {_first_difference(list(images.values()))})",
            )
    return found


def _first_difference(images: list[bytes]) -> int:
    shortest = min(len(image) for image in images)
    for pos in range(shortest):
        if len({image[pos] for image in images}) > 1:
            return pos
    return shortest


def check(
    log: LogHistory | None, queue: QueueHistory | None, replicas: ReplicaImages | None
) -> Anomalies:
    """Every check of one run's history."""
    found = Anomalies()
    if log is not None:
        found.merge(check_log(log))
    if queue is not None:
        found.merge(check_queue(queue))
    if replicas is not None:
        found.merge(check_replicas(replicas))
    return found

"""The checker proves itself: plant one anomaly of each kind in a copy of a real history.

:func:`prove` runs :func:`mq.chaos.checker.check` on copies of a run's own
history, each with one planted anomaly (a lost ack, a moved record, a
duplicate, a reorder, a phantom, a queue message never delivered, a
redelivery after an ack, a double lease, a diverged replica byte), and
returns the kinds it failed to catch: a run whose checker misses a planted
anomaly fails, so a checker that cannot see is never mistaken for a clean
history. Each planting works on an empty history too (it adds the records it
needs). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from mq.chaos.checker import Anomalies, check_log, check_queue, check_replicas
from mq.chaos.history import (
    AckAttempt,
    Acked,
    Delivery,
    LogHistory,
    QueueHistory,
    Read,
    ReplicaImages,
)

PLANT_PRODUCER = -1
"""The producer id of planted records: never a real producer's, so a planting does
not disturb the real history's order checks."""
PLANT_PARTITION = 1_000_000
"""A partition no real topic has: planted records get offsets of their own there."""


def _copy_log(history: LogHistory) -> LogHistory:
    """A copy whose lists and set can change without touching ``history`` (the records
    are frozen: they are shared, which keeps a 100,000-record copy cheap)."""
    return replace(
        history,
        attempted=set(history.attempted),
        acked=list(history.acked),
        read=list(history.read),
        end_offsets=dict(history.end_offsets),
    )


def _copy_queue(history: QueueHistory) -> QueueHistory:
    return replace(
        history,
        sent=list(history.sent),
        deliveries=list(history.deliveries),
        acks=list(history.acks),
    )


def _fresh_value(history: LogHistory, name: str) -> str:
    return f"planted-{name}-{len(history.attempted)}"


def _plant_acked(history: LogHistory, name: str, seq: int, offset: int) -> Acked:
    value = _fresh_value(history, name) + f"-{seq}"
    ack = Acked(value, PLANT_PRODUCER, seq, PLANT_PARTITION, offset)
    history.attempted.add(value)
    history.acked.append(ack)
    history.read.append(Read(value, PLANT_PARTITION, offset))
    return ack


def plant_lost(history: LogHistory) -> LogHistory:
    """An acknowledged record missing from the log."""
    planted = _copy_log(history)
    ack = _plant_acked(planted, "lost", 0, 0)
    planted.read = [r for r in planted.read if r.value != ack.value]
    return planted


def plant_moved(history: LogHistory) -> LogHistory:
    """An acknowledged record found at another offset than its ack said."""
    planted = _copy_log(history)
    ack = _plant_acked(planted, "moved", 0, 0)
    planted.read = [r if r.value != ack.value else replace(r, offset=7) for r in planted.read]
    return planted


def plant_duplicate(history: LogHistory) -> LogHistory:
    """An acknowledged record in the log twice."""
    planted = _copy_log(history)
    ack = _plant_acked(planted, "duplicate", 0, 0)
    planted.read.append(Read(ack.value, PLANT_PARTITION, 1))
    return planted


def plant_reorder(history: LogHistory) -> LogHistory:
    """Two acknowledged records of one producer in one partition, swapped in the log."""
    planted = _copy_log(history)
    first = _plant_acked(planted, "reorder", 0, 10)
    second = _plant_acked(planted, "reorder", 1, 11)
    swapped = {first.value: 11, second.value: 10}
    planted.read = [
        replace(r, offset=swapped[r.value]) if r.value in swapped else r for r in planted.read
    ]
    planted.acked = [
        replace(a, offset=swapped[a.value]) if a.value in swapped else a for a in planted.acked
    ]
    return planted


def plant_phantom(history: LogHistory) -> LogHistory:
    """A record in the log that nobody sent."""
    planted = _copy_log(history)
    planted.read.append(Read(_fresh_value(planted, "phantom"), PLANT_PARTITION, 20))
    return planted


def _planted_delivery(history: QueueHistory, name: str, consumer: int, at: float) -> Delivery:
    body = f"planted-{name}-{len(history.deliveries)}"
    return Delivery(
        body=body,
        partition=PLANT_PARTITION,
        offset=len(history.deliveries),
        delivery_count=1,
        receipt=f"{body}:1:{consumer}",
        consumer=consumer,
        sent_at=at,
        got_at=at,
        lease_deadline=at + history.visibility_s,
    )


def _now(history: QueueHistory) -> float:
    """A time after everything the history holds (plantings do not overlap real leases)."""
    times = [d.lease_deadline for d in history.deliveries] + [a.done_at for a in history.acks]
    return max(times, default=0.0) + 1_000.0


def plant_queue_lost(history: QueueHistory) -> QueueHistory:
    """A message whose send was acknowledged, never delivered."""
    planted = _copy_queue(history)
    planted.sent.append(f"planted-never-delivered-{len(planted.sent)}")
    return planted


def plant_redelivery(history: QueueHistory) -> QueueHistory:
    """A message leased again after an ack of it succeeded."""
    planted = _copy_queue(history)
    visibility = planted.visibility_s
    at = _now(planted)
    first = _planted_delivery(planted, "redelivery", 0, at)
    planted.deliveries.append(first)
    planted.acks.append(AckAttempt(first.receipt, at + 0.1, at + 0.2, True))
    again = at + 5 * visibility + 1
    planted.deliveries.append(
        replace(
            first,
            receipt=first.receipt + "-again",
            delivery_count=2,
            consumer=1,
            sent_at=again,
            got_at=again,
            lease_deadline=again + visibility,
        )
    )
    return planted


def plant_double_lease(history: QueueHistory) -> QueueHistory:
    """One message leased to two consumers at once (granted at the same moment: the
    leases overlap by the whole visibility timeout, which a run keeps above
    :data:`~mq.chaos.checker.LEASE_MARGIN_S`)."""
    planted = _copy_queue(history)
    at = _now(planted)
    first = _planted_delivery(planted, "double", 0, at)
    planted.deliveries.append(first)
    during = at
    planted.deliveries.append(
        replace(
            first,
            receipt=first.receipt + "-twice",
            consumer=1,
            sent_at=during,
            got_at=during,
            lease_deadline=first.lease_deadline,
        )
    )
    return planted


def plant_diverged(replicas: ReplicaImages) -> ReplicaImages:
    """One byte of one replica of a partition whose replicas agree, flipped (or, when
    none agrees yet, a planted partition of two differing replicas)."""
    planted = replace(
        replicas,
        high_watermarks=dict(replicas.high_watermarks),
        images={key: dict(images) for key, images in replicas.images.items()},
    )
    for images in planted.images.values():
        if len(images) > 1 and len(set(images.values())) == 1:
            node, image = next(iter(images.items()))
            if image:
                flipped = bytearray(image)
                flipped[len(flipped) // 2] ^= 0x01
                images[node] = bytes(flipped)
                return planted
    planted.images[("planted", PLANT_PARTITION)] = {1: b"\x00" * 8, 2: b"\x00" * 7 + b"\x01"}
    return planted


def prove(log: LogHistory | None, queue: QueueHistory | None, replicas: ReplicaImages) -> list[str]:
    """The kinds of planted anomaly the checker missed (empty: it caught them all).

    Each copy must show exactly one more anomaly of its planted kind than the real
    history (so a real anomaly cannot hide a missed planting), and no other change."""
    base_log = check_log(log) if log is not None else Anomalies()
    base_queue = check_queue(queue) if queue is not None else Anomalies()
    base_replicas = check_replicas(replicas)
    trials: list[tuple[str, Anomalies]] = []
    if log is not None:
        for kind, plant in (
            ("lost", plant_lost),
            ("moved", plant_moved),
            ("duplicated", plant_duplicate),
            ("reordered", plant_reorder),
            ("phantom", plant_phantom),
        ):
            trials.append((kind, _with(check_log(plant(log)), base_queue, base_replicas)))
    if queue is not None:
        for kind, plant_q in (
            ("queue_lost", plant_queue_lost),
            ("redelivered_after_ack", plant_redelivery),
            ("double_leases", plant_double_lease),
        ):
            trials.append((kind, _with(base_log, check_queue(plant_q(queue)), base_replicas)))
    trials.append(
        ("diverged_replicas", _with(base_log, base_queue, check_replicas(plant_diverged(replicas))))
    )
    base = _with(base_log, base_queue, base_replicas).counts
    missed: list[str] = []
    for kind, found in trials:
        expected = dict(base)
        expected[kind] += 1
        if found.counts != expected:
            missed.append(kind)
    return missed


def _with(*parts: Anomalies) -> Anomalies:
    """The anomalies of the parts together (as :func:`mq.chaos.checker.check` adds them)."""
    total = Anomalies()
    for part in parts:
        total.merge(part)
    return total

"""The chaos history checker (pure): every anomaly kind found, clean histories clean,
and the planted anomalies caught (a checker that missed one would fail its run)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.chaos import planted
from mq.chaos.checker import (
    KINDS,
    MAX_EXAMPLES,
    Anomalies,
    check,
    check_log,
    check_queue,
    check_replicas,
)
from mq.chaos.history import (
    AckAttempt,
    Acked,
    Delivery,
    LogHistory,
    QueueHistory,
    Read,
    ReplicaImages,
)

VIS = 5.0


def _log(n: int = 6, partitions: int = 2) -> LogHistory:
    """Two producers, values spread over partitions, all acked and read back where acked."""
    history = LogHistory(topic="t")
    offsets = dict.fromkeys(range(partitions), 0)
    for seq in range(n):
        for producer in (0, 1):
            value = f"p{producer}-{seq}"
            partition = seq % partitions
            history.attempted.add(value)
            history.acked.append(Acked(value, producer, seq, partition, offsets[partition]))
            history.read.append(Read(value, partition, offsets[partition]))
            offsets[partition] += 1
    history.end_offsets = offsets
    return history


def _counts(found: Anomalies) -> dict[str, int]:
    return {kind: count for kind, count in found.counts.items() if count}


def test_a_clean_log_is_clean() -> None:
    assert check_log(_log()).total == 0


def test_unacked_records_may_be_missing_or_present() -> None:
    history = _log()
    history.attempted |= {"maybe-1", "maybe-2"}
    history.read.append(Read("maybe-1", 0, 100))
    assert check_log(history).total == 0


def test_lost() -> None:
    history = _log()
    history.read = [r for r in history.read if r.value != "p0-3"]
    found = check_log(history)
    assert _counts(found) == {"lost": 1}
    assert "p0-3" in found.examples["lost"][0]


def test_moved() -> None:
    history = _log()
    history.read = [r if r.value != "p1-2" else Read("p1-2", r.partition, 99) for r in history.read]
    assert _counts(check_log(history)) == {"moved": 1}


def test_moved_to_another_partition_is_not_also_a_reorder() -> None:
    history = _log()
    history.read = [r if r.value != "p1-2" else Read("p1-2", 1, 99) for r in history.read]
    assert _counts(check_log(history)) == {"moved": 1}


def test_duplicated_acked_and_unacked() -> None:
    history = _log()
    history.read.append(Read("p0-1", 1, 50))
    history.attempted.add("unacked")
    history.read += [Read("unacked", 0, 60), Read("unacked", 0, 61)]
    found = check_log(history)
    assert found.counts["duplicated"] == 2
    assert found.counts["moved"] == 0  # the acked position is among the copies


def test_reordered_within_one_producer_and_partition() -> None:
    history = _log()
    first, second = "p0-0", "p0-2"  # producer 0, partition 0, seq 0 then 2
    where = {r.value: r.offset for r in history.read}
    history.read = [
        Read(r.value, r.partition, where[second] if r.value == first else where[first])
        if r.value in (first, second)
        else r
        for r in history.read
    ]
    history.acked = [
        Acked(
            a.value,
            a.producer,
            a.seq,
            a.partition,
            where[second] if a.value == first else where[first],
        )
        if a.value in (first, second)
        else a
        for a in history.acked
    ]
    assert _counts(check_log(history)) == {"reordered": 1}


def test_interleaved_producers_are_not_a_reorder() -> None:
    history = LogHistory()
    for offset, (producer, seq) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)]):
        value = f"p{producer}-{seq}"
        history.attempted.add(value)
        history.acked.append(Acked(value, producer, seq, 0, offset))
        history.read.append(Read(value, 0, offset))
    assert check_log(history).total == 0


def test_phantom() -> None:
    history = _log()
    history.read.append(Read("nobody-sent-me", 0, 77))
    assert _counts(check_log(history)) == {"phantom": 1}


def _delivery(body: str, count: int, consumer: int, granted: float) -> Delivery:
    return Delivery(
        body=body,
        partition=0,
        offset=int(body.removeprefix("m")),
        delivery_count=count,
        receipt=f"{body}:{count}:{consumer}:{granted}",
        consumer=consumer,
        sent_at=granted - 0.01,
        got_at=granted + 0.01,
        lease_deadline=granted + VIS,
    )


def _queue() -> QueueHistory:
    """m0 acked at once; m1 not acked, redelivered after its lease ran out, then acked."""
    history = QueueHistory(queue="q", visibility_s=VIS, sent=["m0", "m1"])
    first = _delivery("m0", 1, 0, 100.0)
    history.deliveries.append(first)
    history.acks.append(AckAttempt(first.receipt, 100.1, 100.2, True))
    lapsed = _delivery("m1", 1, 0, 100.0)
    again = _delivery("m1", 2, 1, 100.0 + VIS + 0.5)
    history.deliveries += [lapsed, again]
    history.acks.append(AckAttempt(again.receipt, 106.0, 106.1, True))
    return history


def test_a_clean_queue_is_clean() -> None:
    assert check_queue(_queue()).total == 0


def test_queue_lost() -> None:
    history = _queue()
    history.sent.append("m9")
    assert _counts(check_queue(history)) == {"queue_lost": 1}


def test_redelivered_after_ack() -> None:
    history = _queue()
    history.deliveries.append(_delivery("m0", 1, 1, 103.0))  # count 1 again: state forgotten
    assert _counts(check_queue(history)) == {"redelivered_after_ack": 1}


def test_a_failed_ack_does_not_make_a_later_delivery_an_anomaly() -> None:
    history = QueueHistory(queue="q", visibility_s=VIS, sent=["m0"])
    first = _delivery("m0", 1, 0, 100.0)
    history.deliveries += [first, _delivery("m0", 2, 1, 106.0)]
    history.acks.append(AckAttempt(first.receipt, 100.1, 100.2, False, "timeout"))
    assert check_queue(history).total == 0


def test_double_lease() -> None:
    history = _queue()
    history.deliveries.append(_delivery("m1", 1, 1, 100.5))  # inside m1's first, unacked lease
    found = check_queue(history)
    assert _counts(found) == {"double_leases": 1}


def test_a_lease_ends_when_its_ack_starts() -> None:
    """An ack that reports an error may still have settled: no double lease after it."""
    history = QueueHistory(queue="q", visibility_s=VIS, sent=["m0"])
    first = _delivery("m0", 1, 0, 100.0)
    history.deliveries += [first, _delivery("m0", 2, 1, 101.0)]
    history.acks.append(AckAttempt(first.receipt, 100.5, 100.6, False, "InvalidReceipt"))
    assert check_queue(history).total == 0


def test_overlaps_within_the_margin_are_not_anomalies() -> None:
    history = QueueHistory(queue="q", visibility_s=VIS, sent=["m0"])
    history.deliveries += [_delivery("m0", 1, 0, 100.0), _delivery("m0", 2, 1, 100.0 + VIS - 0.1)]
    assert check_queue(history).total == 0


def test_the_same_delivery_reported_twice_is_one_lease() -> None:
    history = QueueHistory(queue="q", visibility_s=VIS, sent=["m0"])
    one = _delivery("m0", 1, 0, 100.0)
    history.deliveries += [one, one]
    assert check_queue(history).total == 0


def test_replicas() -> None:
    images = ReplicaImages(
        high_watermarks={("t", 0): 3, ("t", 1): 3},
        images={("t", 0): {1: b"abc", 2: b"abc", 3: b"abc"}, ("t", 1): {1: b"abc", 2: b"abd"}},
    )
    found = check_replicas(images)
    assert _counts(found) == {"diverged_replicas": 1}
    assert "t-1" in found.examples["diverged_replicas"][0]
    assert "byte 2" in found.examples["diverged_replicas"][0]
    shorter = ReplicaImages(images={("t", 0): {1: b"abc", 2: b"ab"}})
    assert _counts(check_replicas(shorter)) == {"diverged_replicas": 1}


def test_examples_are_bounded_counts_are_not() -> None:
    history = _log(n=MAX_EXAMPLES * 2)
    history.read = []
    found = check_log(history)
    assert found.counts["lost"] == len(history.acked)
    assert len(found.examples["lost"]) == MAX_EXAMPLES
    merged = Anomalies()
    merged.merge(found)
    merged.merge(found)
    assert merged.counts["lost"] == 2 * len(history.acked)
    assert len(merged.examples["lost"]) == MAX_EXAMPLES
    assert set(merged.to_json()["counts"]) == set(KINDS)


@pytest.mark.parametrize("with_real_anomalies", [False, True])
def test_every_planted_anomaly_is_caught(with_real_anomalies: bool) -> None:
    log, queue = _log(), _queue()
    replicas = ReplicaImages(images={("t", 0): {1: b"abcd", 2: b"abcd"}})
    if with_real_anomalies:  # a real anomaly of each kind must not hide a planted one
        log.read = [*log.read[1:], Read("nobody", 0, 99)]
        queue.deliveries.append(_delivery("m0", 1, 1, 103.0))
        replicas.images[("t", 1)] = {1: b"x", 2: b"y"}
    assert planted.prove(log, queue, replicas) == []
    assert planted.prove(LogHistory(), QueueHistory(visibility_s=1), ReplicaImages()) == []
    assert planted.prove(None, None, ReplicaImages()) == []


def test_a_blind_checker_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the checker stopped seeing a kind, proving it says so."""
    real = planted.check_log

    def blind(history: LogHistory) -> Anomalies:
        found = real(history)
        found.counts["reordered"] = 0
        return found

    monkeypatch.setattr(planted, "check_log", blind)
    assert planted.prove(_log(), _queue(), ReplicaImages()) == ["reordered"]


def test_each_planting_changes_only_its_kind() -> None:
    log, queue = _log(), _queue()
    base = check(log, queue, ReplicaImages()).counts
    for kind, planted_log in [
        ("lost", planted.plant_lost(log)),
        ("moved", planted.plant_moved(log)),
        ("duplicated", planted.plant_duplicate(log)),
        ("reordered", planted.plant_reorder(log)),
        ("phantom", planted.plant_phantom(log)),
    ]:
        counts = check(planted_log, queue, ReplicaImages()).counts
        assert {k: counts[k] - base[k] for k in KINDS if counts[k] != base[k]} == {kind: 1}
    assert check(log, queue, ReplicaImages()).counts == base  # the originals untouched


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 40), st.floats(1, 30))
def test_random_clean_queue_histories_are_clean(seed: int, messages: int, vis: float) -> None:
    """Consumers that each wait out the previous lease (or its ack) never make anomalies."""
    rng = random.Random(seed)
    history = QueueHistory(queue="q", visibility_s=vis)
    for m in range(messages):
        body = f"m{m}"
        history.sent.append(body)
        at = rng.uniform(0, 100)
        for count in range(1, rng.randint(1, 4) + 1):
            delivery = _delivery(body, count, rng.randint(0, 3), at)
            delivery = Delivery(**{**delivery.__dict__, "lease_deadline": at + vis})
            history.deliveries.append(delivery)
            if rng.random() < 0.5:  # acked: the last delivery
                done = at + rng.uniform(0, vis - 0.3)
                history.acks.append(AckAttempt(delivery.receipt, done - 0.01, done, True))
                break
            at += vis + rng.uniform(0.3, 5)  # the lease ran out before the next
    assert check_queue(history).total == 0
    assert planted.prove(None, history, ReplicaImages()) == []

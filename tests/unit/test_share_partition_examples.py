"""A share partition (SQS semantics on a log), one behaviour at a time: leases and
redelivery, dead letters, delays, dedup, FIFO, filters, in-flight bounds, restarts and
truncation. ``test_share_partition.py`` holds it against a model over random runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from mq.errors import InvalidReceiptError
from mq.queues.headers import DEDUP_ID, DELAY_MS
from mq.queues.share_partition import (
    Acquired,
    Attributes,
    DeadLetter,
    RecordMeta,
    ShareConfig,
    SharePartition,
    State,
)

T0 = 1_700_000_000_000


def meta(
    offset: int, key: bytes | None = None, ts: int = T0, headers: Sequence[tuple[str, bytes]] = ()
) -> RecordMeta:
    return RecordMeta(offset, ts, key, b"v", tuple(headers))


def filled(n: int, **config: Any) -> SharePartition:
    sp = SharePartition(ShareConfig(**config))
    sp.add([meta(i) for i in range(n)], n, T0)
    return sp


def test_an_expired_lease_is_redelivered_with_the_next_count() -> None:
    sp = filled(2)
    assert sp.acquire(T0, 1, 100) == [Acquired(0, 1, T0 + 100)]
    assert sp.next_deadline() == T0 + 100
    assert sp.expire(T0 + 99) == 0
    assert sp.expire(T0 + 100) == 1
    assert sp.state_of(0) == (State.AVAILABLE, 1)
    assert sp.acquire(T0 + 100, 1, 100) == [Acquired(0, 2, T0 + 200)]
    with pytest.raises(InvalidReceiptError):
        sp.ack(0, 1, T0 + 101)  # the first consumer's lease is over
    sp.ack(0, 2, T0 + 101)
    assert (sp.start, sp.state_of(0), sp.acked) == (1, None, 1)


@pytest.mark.parametrize("dead_letter", [True, False])
def test_a_record_out_of_deliveries_is_dead_lettered(dead_letter: bool) -> None:
    sp = filled(2, max_deliveries=2, dead_letter=dead_letter)
    for count in (1, 2):
        assert sp.acquire(T0, 1, 10) == [Acquired(0, count, T0 + 10)]
        sp.release(0, count, T0)
    assert sp.acquire(T0, 1, 10) == [Acquired(1, 1, T0 + 10)]
    sp.reject(1, 1, T0)
    if not dead_letter:
        assert (sp.start, sp.end, sp.pending_dead_letters()) == (2, 2, [])
        return
    assert sp.pending_dead_letters() == [
        DeadLetter(0, 2, "released by the consumer (delivery 2)"),
        DeadLetter(1, 1, "rejected by the consumer"),
    ]
    assert sp.state_of(0) == (State.DEAD_LETTERING, 2)
    assert sp.attributes(T0).dead_lettering == 2
    sp.dead_lettered_at(1)
    assert sp.start == 0  # offset 0 still waits for the dead-letter queue
    sp.dead_lettered_at(0)
    assert (sp.start, sp.dead_lettered, sp.pending_dead_letters()) == (2, 2, [])


def test_expiry_at_max_deliveries_dead_letters() -> None:
    sp = filled(1, max_deliveries=1, dead_letter=True)
    sp.acquire(T0, 1, 10)
    assert sp.expire(T0 + 10) == 1
    assert sp.pending_dead_letters() == [
        DeadLetter(0, 1, "visibility timeout expired (delivery 1)")
    ]


def test_delays_hide_records_until_due() -> None:
    sp = SharePartition(ShareConfig(delay_ms=20))
    sp.add(
        [meta(0, headers=[(DELAY_MS, b"50")]), meta(1), meta(2, headers=[(DELAY_MS, b"0")])], 3, T0
    )
    assert sp.attributes(T0) == Attributes(1, 2, 0, 0, T0)
    assert sp.next_deadline() == T0 + 20
    assert [a.offset for a in sp.acquire(T0, 10, 100)] == [2]
    assert [a.offset for a in sp.acquire(T0 + 20, 10, 100)] == [1]
    assert sp.acquire(T0 + 49, 10, 100) == []
    assert [a.offset for a in sp.acquire(T0 + 50, 10, 100)] == [0]
    sp.release(0, 1, T0 + 50, delay_ms=30)  # a nack with a delay
    assert sp.state_of(0) == (State.AVAILABLE, 1)
    assert sp.acquire(T0 + 79, 10, 100) == []
    assert sp.acquire(T0 + 80, 10, 100) == [Acquired(0, 2, T0 + 180)]


def test_dedup_drops_repeats_within_the_window_only() -> None:
    sp = SharePartition(ShareConfig(dedup_window_ms=100))
    dedup = [(DEDUP_ID, b"order-1")]
    stamps = [T0, T0 + 50, T0 + 100, T0 + 150, T0 + 300]
    sp.add([meta(i, ts=ts, headers=dedup) for i, ts in enumerate(stamps)], 5, T0 + 300)
    # T0+100 is 100 ms after the accepted T0 (the drop at T0+50 does not count)
    assert [a.offset for a in sp.acquire(T0 + 300, 10, 100)] == [0, 2, 4]
    assert sp.state_of(1) == (State.ARCHIVED, 0)
    assert sp.state_of(3) == (State.ARCHIVED, 0)
    assert sp.deduplicated == 2


def test_fifo_delivers_a_key_in_order_one_at_a_time() -> None:
    sp = SharePartition(ShareConfig(fifo=True, dead_letter=True))
    sp.add([meta(0, b"a"), meta(1, b"a"), meta(2, b"b"), meta(3, b"a")], 4, T0)
    assert [a.offset for a in sp.acquire(T0, 10, 100)] == [0, 2]
    assert sp.acquire(T0, 10, 100) == []
    sp.release(0, 1, T0, delay_ms=10)  # the key waits for its head
    assert sp.acquire(T0 + 9, 10, 100) == []
    assert sp.acquire(T0 + 10, 10, 100) == [Acquired(0, 2, T0 + 110)]
    sp.ack(0, 2, T0 + 10)
    assert [a.offset for a in sp.acquire(T0 + 10, 10, 100)] == [1]
    sp.reject(1, 1, T0 + 10)  # dead-lettering frees the key
    assert [a.offset for a in sp.acquire(T0 + 10, 10, 100)] == [3]


def test_filters_skip_records_without_losing_them() -> None:
    sp = SharePartition(ShareConfig())
    tags = [b"x", b"y", None, b"y"]
    sp.add([meta(i, headers=[("tag", t)] if t else []) for i, t in enumerate(tags)], 4, T0)
    assert [a.offset for a in sp.acquire(T0, 10, 100, {"tag": {b"y"}})] == [1, 3]
    assert sp.acquire(T0, 10, 100, {"tag": {b"z"}, "other": {b"y"}}) == []
    assert sp.acquire(T0, 10, 100, {DELAY_MS: {b"0"}}) == []  # reserved headers never match
    assert [a.offset for a in sp.acquire(T0, 10, 100)] == [0, 2]


def test_max_in_flight_bounds_leases() -> None:
    sp = filled(5, max_in_flight=2)
    assert [a.offset for a in sp.acquire(T0, 10, 100)] == [0, 1]
    assert not sp.has_visible(T0)
    sp.ack(0, 1, T0)
    assert sp.has_visible(T0)
    assert [a.offset for a in sp.acquire(T0, 10, 100)] == [2]


def test_extend_moves_the_deadline_and_zero_releases() -> None:
    sp = filled(1)
    sp.acquire(T0, 1, 100)
    assert sp.extend(0, 1, T0 + 50, 200) == T0 + 250
    assert sp.expire(T0 + 100) == 0  # the old deadline no longer counts
    assert sp.extend(0, 1, T0 + 60, 0) == T0 + 60
    assert sp.state_of(0) == (State.AVAILABLE, 1)
    with pytest.raises(InvalidReceiptError):
        sp.extend(0, 1, T0 + 60, 100)
    assert sp.acquire(T0 + 60, 1, 100) == [Acquired(0, 2, T0 + 160)]


def reopen(sp: SharePartition, records: list[RecordMeta], now: int) -> SharePartition:
    restored = SharePartition.restore(sp.config, json.loads(json.dumps(sp.snapshot())))
    restored.seed_dedup(records)
    restored.add([r for r in records if r.offset >= restored.start], sp.end, now)
    return restored


def test_a_restart_keeps_leases_so_old_receipts_still_work() -> None:
    records = [meta(i) for i in range(4)]
    sp = SharePartition(ShareConfig(dead_letter=True))
    sp.add(records, 4, T0)
    sp.acquire(T0, 3, 100)
    sp.ack(1, 1, T0)
    sp.reject(2, 1, T0)
    sp = reopen(sp, records, T0 + 10)
    assert not sp.restoring
    assert [(o, s, c) for o, s, c, _ in sp.entries()] == [
        (0, State.ACQUIRED, 1),
        (1, State.ACKED, 1),
        (2, State.DEAD_LETTERING, 1),
        (3, State.AVAILABLE, 0),
    ]
    assert (sp.in_flight, sp.acked) == (1, 1)
    assert sp.pending_dead_letters() == [DeadLetter(2, 1, "rejected by the consumer")]
    assert [a.offset for a in sp.acquire(T0 + 10, 10, 100)] == [3]
    sp.ack(0, 1, T0 + 20)  # a receipt from before the restart
    assert sp.start == 2
    assert sp.expire(T0 + 110) == 1  # 3's lease survives too
    assert sp.state_of(3) == (State.AVAILABLE, 1)


def test_repeated_restarts_keep_the_snapshot_small() -> None:
    records = [meta(i) for i in range(3)]
    sp = SharePartition(ShareConfig())
    sp.add(records, 3, T0)
    sp.acquire(T0, 3, 100)
    first = sp.snapshot()
    for _ in range(3):
        sp = reopen(sp, records, T0)
        assert not sp.restoring
        assert sp.snapshot() == first


def test_dedup_survives_a_restart_without_counting_twice() -> None:
    dedup = [(DEDUP_ID, b"d")]
    records = [meta(0), meta(1, headers=dedup), meta(2, headers=dedup)]
    sp = SharePartition(ShareConfig())
    sp.add(records, 3, T0)
    assert sp.deduplicated == 1
    sp = reopen(sp, records, T0)
    assert (sp.deduplicated, sp.state_of(2)) == (1, (State.ARCHIVED, 0))


def test_truncate_below_forgets_records_and_leases() -> None:
    sp = SharePartition(ShareConfig(fifo=True, dead_letter=True))
    sp.add([meta(0, b"a"), meta(1, b"a"), meta(2, b"b"), meta(3, b"b")], 4, T0)
    sp.acquire(T0, 10, 100)  # 0 and 2
    sp.ack(2, 1, T0)
    sp.truncate_below(1, T0)
    assert (sp.start, sp.end, sp.in_flight) == (1, 4, 0)
    with pytest.raises(InvalidReceiptError):
        sp.ack(0, 1, T0)
    assert [a.offset for a in sp.acquire(T0, 10, 100)] == [1, 3]  # 1 heads key a now
    sp.truncate_below(2, T0)
    assert sp.start == 3  # 2 was acked: the window starts at the first unfinished record
    sp.truncate_below(9, T0)  # past the end: nothing left, reading resumes at 9
    assert (sp.start, sp.end, list(sp.entries()), sp.in_flight) == (9, 9, [], 0)
    sp.add([meta(9, b"a")], 10, T0)
    assert [a.offset for a in sp.acquire(T0, 10, 100)] == [9]


def test_a_receipt_naming_no_delivery_is_told_from_an_ended_lease() -> None:
    sp = filled(3)
    assert sp.acquire(T0, 1, 100) == [Acquired(0, 1, T0 + 100)]
    assert sp.never_delivered(5, 1)  # beyond what the partition holds
    assert sp.never_delivered(1, 1)  # there, but not delivered yet
    assert sp.never_delivered(0, 2)  # delivered once, not twice
    assert sp.never_delivered(0, 0)
    assert not sp.never_delivered(0, 1)  # the lease now held
    sp.ack(0, 1, T0)
    assert not sp.never_delivered(0, 1)  # settled (below start: done)
    assert sp.acquire(T0, 1, 100) == [Acquired(1, 1, T0 + 100)]
    assert sp.expire(T0 + 100) == 1
    assert not sp.never_delivered(1, 1)  # a lease that ended


def test_a_repeated_settle_of_the_same_receipt_succeeds_and_changes_nothing() -> None:
    sp = filled(3)
    sp.acquire(T0, 3, 100)
    sp.ack(0, 1, T0)
    sp.release(1, 1, T0, delay_ms=50)
    sp.reject(2, 1, T0)
    version = sp.version
    sp.ack(0, 1, T0 + 1)  # a client's retry after a lost answer
    sp.release(1, 1, T0 + 1)
    sp.extend(1, 1, T0 + 1, 0)  # extend(0) is a release
    sp.reject(2, 1, T0 + 1)
    assert (sp.version, sp.acked, sp.state_of(1)) == (version, 1, (State.AVAILABLE, 1))
    with pytest.raises(InvalidReceiptError):
        sp.reject(0, 1, T0)  # settled, but another way
    with pytest.raises(InvalidReceiptError):
        sp.ack(1, 1, T0)  # released: its receipt no longer acks
    with pytest.raises(InvalidReceiptError):
        sp.ack(0, 2, T0)  # never delivered with that count


def test_a_repeated_ack_succeeds_after_a_restart_and_the_memory_is_bounded() -> None:
    sp = filled(4, settled_memory=2)
    sp.acquire(T0, 4, 100)
    for offset in range(3):
        sp.ack(offset, 1, T0)
    restored = SharePartition.restore(sp.config, json.loads(json.dumps(sp.snapshot())))
    restored.add([meta(i) for i in range(restored.start, 4)], 4, T0)
    restored.ack(2, 1, T0)
    restored.ack(1, 1, T0)
    with pytest.raises(InvalidReceiptError):
        restored.ack(0, 1, T0)  # forgotten: only the last two are remembered
    assert restored.acked == 3

"""The producer's accumulator (pure, fake clock): batching, readiness, draining, order."""

from __future__ import annotations

import itertools

import pytest

from mq.client.accumulator import RecordAccumulator
from mq.client.producer_batch import ProducerBatch
from mq.client.types import TopicPartition
from mq.errors import NetworkError
from mq.records.batch import parse_header
from mq.records.compression import CODEC_GZIP
from mq.records.records import decode_records

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)
LEADERS = {T0: 1, T1: 2, U0: 1}


def leader_of(tp: TopicPartition) -> int | None:
    return LEADERS.get(tp)


def not_muted(tp: TopicPartition) -> bool:
    return False


def fill(
    acc: RecordAccumulator, tp: TopicPartition, count: int, now: float = 0.0
) -> list[tuple[ProducerBatch, int]]:
    out = []
    for i in range(count):
        placed = acc.append(tp, b"k%d" % i, b"v" * 50, [("h", b"%d" % i)], 1000 + i, now)
        assert placed is not None
        out.append(placed)
    return out


def test_records_fill_a_batch_then_the_next_one_opens() -> None:
    acc = RecordAccumulator(batch_size=1024, linger_s=1)
    placed = fill(acc, T0, 40)
    batches = list(dict.fromkeys(batch for batch, _ in placed))
    assert len(batches) > 1
    assert all(not b.is_open for b in batches[:-1])
    assert batches[-1].is_open
    assert next(index for batch, index in placed if batch is batches[1]) == 0
    records = [r for b in batches[:-1] for r in decode_records(b.close())]
    records += decode_records(batches[-1].close())
    assert [(r.key, r.timestamp, r.headers) for r in records] == [
        (b"k%d" % i, 1000 + i, (("h", b"%d" % i),)) for i in range(40)
    ]
    assert all(b.size <= 1024 for b in batches)


def test_an_oversized_record_gets_a_batch_of_its_own() -> None:
    acc = RecordAccumulator(batch_size=200, linger_s=0)
    acc.append(T0, None, b"small", (), 1, 0.0)
    big, index = acc.append(T0, None, b"x" * 1000, (), 1, 0.0) or (None, -1)
    assert big is not None
    assert index == 0
    acc.append(T0, None, b"small", (), 1, 0.0)
    sizes = []
    for _ in range(3):
        drained = acc.drain({1}, 1.0, leader_of, not_muted, max_request_bytes=10_000)
        sizes.append([len(b.close()) > 200 for b in drained[1]])
    assert sizes == [[False], [True], [False]]  # the big one travels alone


def test_readiness_by_linger_fullness_flush_and_mute() -> None:
    acc = RecordAccumulator(batch_size=1024, linger_s=0.5)
    fill(acc, T0, 1, now=10.0)
    nodes, wait, unknown = acc.ready(10.1, leader_of, not_muted)
    assert nodes == set()
    assert wait == pytest.approx(0.4)
    assert unknown == set()
    assert acc.ready(10.5, leader_of, not_muted)[0] == {1}
    assert acc.ready(10.5, leader_of, lambda tp: tp == T0)[0] == set()
    acc.flushing += 1
    fill(acc, T1, 1, now=20.0)
    assert acc.ready(20.0, leader_of, not_muted)[0] == {1, 2}
    acc.flushing -= 1
    fill(acc, U0, 30, now=30.0)  # a full batch is ready at once
    assert acc.ready(30.0, leader_of, lambda tp: tp != U0)[0] == {1}
    assert acc.ready(30.0, lambda tp: None, not_muted)[2] == {"t", "u"}


def test_drain_takes_consecutive_batches_per_partition_within_the_request_bound() -> None:
    acc = RecordAccumulator(batch_size=512, linger_s=0)
    fill(acc, T0, 30)
    fill(acc, U0, 30)
    fill(acc, T1, 5)
    queued = acc.queued()
    drained = acc.drain({1}, 1.0, leader_of, not_muted, max_request_bytes=1500)
    assert set(drained) == {1}
    taken = drained[1]
    assert sum(len(b.close()) for b in taken) <= 1500 + 512
    assert all(not b.is_open for b in taken)
    for tp in (T0, U0):  # per partition, in order from the front
        mine = [b for b in taken if b.tp == tp]
        assert mine == sorted(mine, key=lambda b: b.created)
    assert acc.queued() == queued - len(taken)
    assert acc.drain({1}, 1.0, leader_of, lambda tp: True, max_request_bytes=10**6) == {}
    rest = acc.drain({1, 2}, 1.0, leader_of, not_muted, max_request_bytes=10**6)
    assert {b.tp for b in rest[2]} == {T1}


def test_an_idempotent_drain_takes_one_batch_per_partition() -> None:
    """The broker checks an idempotent producer's sequences one batch per request."""
    acc = RecordAccumulator(batch_size=256, linger_s=0, idempotent=True)
    fill(acc, T0, 20)
    fill(acc, U0, 20)
    drained = acc.drain({1}, 1.0, leader_of, not_muted, max_request_bytes=10**6)[1]
    assert sorted(b.tp for b in drained) == sorted([T0, U0])


def test_retried_batches_go_back_to_the_front_after_a_backoff() -> None:
    acc = RecordAccumulator(batch_size=256, linger_s=0)
    fill(acc, T0, 10)
    first = acc.drain({1}, 0.0, leader_of, not_muted, max_request_bytes=300)[1]
    fill(acc, T0, 3)
    acc.reenqueue(first, retry_at=5.0)
    assert [b.attempts for b in first] == [1] * len(first)
    assert acc.ready(4.0, leader_of, not_muted)[0] == set()
    again = acc.drain({1}, 5.0, leader_of, not_muted, max_request_bytes=10**6)[1]
    assert again[: len(first)] == first


def test_expired_batches_and_the_buffer_bound() -> None:
    acc = RecordAccumulator(batch_size=128, linger_s=0, buffer_bytes=256, delivery_timeout_s=10)
    assert acc.append(T0, None, b"x" * 100, (), 1, 0.0) is not None
    assert acc.append(T1, None, b"x" * 100, (), 1, 0.0) is not None
    assert acc.append(U0, None, b"x" * 100, (), 1, 0.0) is None  # full: wait for room
    assert acc.expired(9.9) == []
    expired = acc.expired(10.0)
    assert {b.tp for b in expired} == {T0, T1}
    for batch in expired:
        batch.fail(NetworkError())
        acc.release(batch)
    assert acc.used_bytes == 0
    assert acc.append(U0, None, b"x" * 100, (), 1, 20.0) is not None


def test_idempotent_batches_carry_consecutive_sequences() -> None:
    acc = RecordAccumulator(batch_size=300, linger_s=0, idempotent=True, codec=CODEC_GZIP)
    acc.set_producer_id(42, 3)
    placed = fill(acc, T0, 20) + fill(acc, T1, 2)
    batches = list(dict.fromkeys(batch for batch, _ in placed))
    headers = [parse_header(b.close()) for b in batches]
    pairs = zip(batches, headers, strict=True)
    t0 = [(h.base_sequence, h.records_count) for b, h in pairs if b.tp == T0]
    assert t0[0][0] == 0
    for (seq, count), (next_seq, _) in itertools.pairwise(t0):
        assert next_seq == seq + count
    assert [h.base_sequence for b, h in zip(batches, headers, strict=False) if b.tp == T1] == [0]
    assert {(h.producer_id, h.producer_epoch) for h in headers} == {(42, 3)}
    assert batches[0].close() == batches[0].close()  # built once: retries resend these bytes
    acc.set_producer_id(43, 0)  # the 20 queued records of T0 are re-stamped 0..19
    batch, _ = acc.append(T0, None, b"x", (), 1, 0.0) or (None, 0)
    assert batch is not None
    assert parse_header(batch.close()).base_sequence == 20
    assert parse_header(batches[0].close())[9:12] == (43, 0, 0)


def test_batch_callbacks_run_once() -> None:
    acc = RecordAccumulator()
    batch, _ = fill(acc, T0, 1)[0]
    seen: list[int] = []
    batch.add_callback(lambda b: seen.append(b.base_offset))
    batch.complete(7)
    batch.fail(NetworkError())  # too late: ignored
    batch.add_callback(lambda b: seen.append(-b.base_offset))
    assert seen == [7, -7]
    assert batch.error is None


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        RecordAccumulator(batch_size=0)


def test_a_new_epoch_restamps_queued_batches_from_sequence_zero() -> None:
    acc = RecordAccumulator(batch_size=300, linger_s=0, idempotent=True)
    acc.set_producer_id(7, 0)
    fill(acc, T0, 12)
    sent = acc.drain({1}, 0.0, leader_of, not_muted, max_request_bytes=300)[1]
    assert parse_header(sent[0].close()).base_sequence == 0
    acc.reenqueue(sent, retry_at=0.0)
    assert acc.head_was_sent(T0)
    assert acc.any_head_was_sent()
    assert not acc.head_was_sent(T1)
    [gone] = acc.drain({1}, 0.0, leader_of, not_muted, max_request_bytes=10**6)[1]
    assert gone is sent[0]  # and gone for good: a gap at its sequence
    acc.set_producer_id(7, 1)
    again = []
    while drained := acc.drain({1}, 0.0, leader_of, not_muted, max_request_bytes=10**6):
        again += drained[1]  # one batch per drain: idempotent
    assert len(again) > 1
    headers = [parse_header(b.close()) for b in again]
    assert [(h.producer_id, h.producer_epoch) for h in headers] == [(7, 1)] * len(again)
    expected, sequence = [], 0
    for batch in again:
        expected.append(sequence)
        sequence += batch.count
    assert [h.base_sequence for h in headers] == expected
    assert all(decode_records(b.close()) for b in again)  # the CRCs were rewritten too
    batch, _ = acc.append(T0, None, b"x", (), 1, 0.0) or (None, 0)
    assert batch is not None
    assert parse_header(batch.close()).base_sequence == sequence


def test_ready_names_the_sendable_partitions_drain_looks_only_there() -> None:
    woken: list[float] = []
    acc = RecordAccumulator(batch_size=1024, linger_s=0.5, on_new_batch=woken.append)
    fill(acc, T0, 1, now=10.0)
    fill(acc, T1, 1, now=10.3)
    assert woken == [10.5, pytest.approx(10.8)]  # each new batch says when it falls due
    assert acc.next_due([T0, T1]) == 10.5
    assert acc.next_due([U0]) == float("inf")
    nodes, wait, _ = acc.ready(10.6, leader_of, not_muted)
    assert (nodes, acc.sendable) == ({1}, [T0])
    assert wait == pytest.approx(0.2)
    # only the candidates are looked at: T1 is not due and is not even considered
    drained = acc.drain({1, 2}, 10.6, leader_of, not_muted, 10_000, acc.sendable)
    assert [b.tp for b in drained[1]] == [T0]
    assert 2 not in drained
    assert acc.drain({2}, 10.6, leader_of, not_muted, 10_000, []) == {}
    fill(acc, U0, 30, now=11.0)  # U0 fills a batch: closing it asks for a wake now
    assert 0.0 in woken

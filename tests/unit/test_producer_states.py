"""Idempotent-producer bookkeeping: retries answered with original offsets, gaps refused."""

from __future__ import annotations

import pytest

from mq.errors import InvalidProducerEpochError, OutOfOrderSequenceError, UnknownProducerIdError
from mq.records.batch import ENCRYPTED_BIT, BatchHeader
from mq.storage.producers import CACHED_BATCHES, SEQUENCE_MODULUS, ProducerStates

CRC = 0x1234


def header(
    pid: int,
    epoch: int,
    seq: int,
    count: int,
    offset: int = 0,
    ts: int = 1,
    crc: int = CRC,
    attributes: int = 0,
) -> BatchHeader:
    return BatchHeader(
        offset, 100, 0, 2, crc, attributes, count - 1, ts, ts, pid, epoch, seq, count
    )


def append(states: ProducerStates, h: BatchHeader) -> tuple[int, int]:
    """What a log does: check, then (if new) record at the offsets it assigns."""
    cached = states.check(h)
    if cached is not None:
        return cached.first_offset, cached.last_offset
    states.record(h)
    return h.base_offset, h.last_offset


def test_sequences_in_order_are_appended_and_a_retry_gets_its_original_offsets() -> None:
    states = ProducerStates()
    assert append(states, header(7, 0, 0, 3, offset=10)) == (10, 12)
    assert append(states, header(7, 0, 3, 2, offset=13)) == (13, 14)
    # the first batch is retried (its response was lost): same offsets, nothing new
    assert states.check(header(7, 0, 0, 3, offset=99)) == (0, 2, 10, 12, CRC)
    assert states.check(header(7, 0, 3, 2, offset=99)) == (3, 4, 13, 14, CRC)


def test_a_gap_or_a_replay_that_is_not_cached_is_out_of_order() -> None:
    states = ProducerStates()
    append(states, header(7, 0, 0, 3))
    with pytest.raises(OutOfOrderSequenceError):
        states.check(header(7, 0, 4, 1))  # skips sequence 3
    with pytest.raises(OutOfOrderSequenceError):
        states.check(header(7, 0, 1, 2))  # overlaps, but is no batch that was written


def test_only_the_last_five_batches_are_remembered() -> None:
    states = ProducerStates()
    for i in range(CACHED_BATCHES + 1):
        append(states, header(7, 0, i, 1, offset=i))
    with pytest.raises(OutOfOrderSequenceError):
        states.check(header(7, 0, 0, 1))
    assert states.check(header(7, 0, 1, 1)) is not None


def test_epochs_fence_old_producers_and_restart_sequences() -> None:
    states = ProducerStates()
    append(states, header(7, 1, 0, 5))
    with pytest.raises(InvalidProducerEpochError):
        states.check(header(7, 0, 5, 1))
    with pytest.raises(OutOfOrderSequenceError):
        states.check(header(7, 2, 5, 1))
    assert states.check(header(7, 2, 0, 1)) is None


def test_unknown_producer_must_start_at_zero_and_plain_batches_are_ignored() -> None:
    states = ProducerStates()
    with pytest.raises(UnknownProducerIdError):
        states.check(header(9, 0, 12, 1))
    assert states.check(header(-1, -1, -1, 4)) is None
    states.record(header(-1, -1, -1, 4))
    assert states.producers == {}


def test_sequences_wrap_around() -> None:
    states = ProducerStates()
    append(states, header(7, 0, 0, 1))
    states.producers[7].batches[-1] = (
        states.producers[7].batches[-1]._replace(last_sequence=SEQUENCE_MODULUS - 1)
    )
    assert states.check(header(7, 0, 0, 1)) is None


def test_truncate_expire_and_snapshot_round_trip() -> None:
    states = ProducerStates()
    append(states, header(7, 0, 0, 2, offset=0, ts=100))
    append(states, header(7, 0, 2, 2, offset=2, ts=200))
    append(states, header(8, 3, 0, 1, offset=4, ts=50))
    copy = ProducerStates.decode(states.encode())
    assert copy.encode() == states.encode()
    assert copy.check(header(7, 0, 2, 2)) == (2, 3, 2, 3, CRC)
    assert copy.expire(older_than_ms=60) == 1
    assert 8 not in copy.producers
    copy.truncate(2)
    assert copy.check(header(7, 0, 2, 2)) is None  # the batch at offset 2 is gone
    with pytest.raises(ValueError, match="snapshot"):
        ProducerStates.decode(b'{"version": 1}')


def test_the_epochs_first_offset_is_kept_past_the_cached_batches_and_in_snapshots() -> None:
    """Where a producer's current epoch starts (describe_producers' epoch_start_offset:
    the exactly-once Spark sink reads back from there)."""
    states = ProducerStates()
    append(states, header(7, 0, 0, 2, offset=10))
    append(states, header(9, 0, 0, 1, offset=12))
    for i in range(CACHED_BATCHES + 2):  # the first batch leaves the cache
        append(states, header(7, 0, 2 + i, 1, offset=13 + i))
    assert states.producers[7].epoch_start() == 10
    assert states.producers[9].epoch_start() == 12
    append(states, header(7, 1, 0, 1, offset=40))  # a new epoch starts anew
    assert states.producers[7].epoch_start() == 40
    copy = ProducerStates.decode(states.encode())
    assert copy.producers[7].epoch_start() == 40
    copy.truncate(41)
    assert copy.producers[7].epoch_start() == 40
    # a snapshot of an older broker has no start offset: the cached batch that starts
    # the epoch (sequence 0) gives it, else it is unknown (-1)
    old = b'{"version":1,"producers":{"5":[0,1,[[0,1,30,31]]],"6":[0,1,[[8,9,50,51]]]}}'
    older = ProducerStates.decode(old)
    assert older.producers[5].epoch_start() == 30
    assert older.producers[6].epoch_start() == -1


def test_the_same_sequences_with_other_records_are_a_second_writer_not_a_retry() -> None:
    """Two writers on one producer id and epoch (two attempts of one exactly-once Spark
    task) send the same sequence numbers with different records: the second is refused,
    not answered with the first one's offsets (which dropped its records)."""
    states = ProducerStates()
    append(states, header(7, 0, 0, 3, offset=10, crc=0xAAAA))
    assert states.check(header(7, 0, 0, 3, crc=0xAAAA)) is not None  # a true retry
    with pytest.raises(OutOfOrderSequenceError, match="two writers") as caught:
        states.check(header(7, 0, 0, 3, crc=0xBBBB))
    assert "offset 10" in caught.value.message
    # the producer's CRC is kept in snapshots; an older snapshot's entry has none
    copy = ProducerStates.decode(states.encode())
    with pytest.raises(OutOfOrderSequenceError):
        copy.check(header(7, 0, 0, 3, crc=0xBBBB))
    old = ProducerStates.decode(b'{"version":1,"producers":{"7":[0,1,[[0,2,10,12]]]}}')
    assert old.check(header(7, 0, 0, 3, crc=0xBBBB)) is not None


def test_an_encrypted_batch_keeps_the_producers_crc_or_none() -> None:
    """The stored header of a sealed batch has the sealed CRC: the log passes the
    producer's; read back from the log (a follower, a rebuild) it is unknown and the
    sequences alone decide, as before."""
    states = ProducerStates()
    sealed = header(7, 0, 0, 3, offset=10, crc=0x5EA1, attributes=ENCRYPTED_BIT)
    states.record(sealed, crc=0xAAAA)
    assert states.check(header(7, 0, 0, 3, crc=0xAAAA)) is not None
    with pytest.raises(OutOfOrderSequenceError):
        states.check(header(7, 0, 0, 3, crc=0xBBBB))
    rebuilt = ProducerStates()
    rebuilt.record(sealed)
    assert rebuilt.check(header(7, 0, 0, 3, crc=0xBBBB)) is not None

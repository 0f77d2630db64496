"""The log keeps idempotent producers' retries out, across reopens too."""

from __future__ import annotations

from pathlib import Path

import pytest

from mq.errors import OutOfOrderSequenceError
from mq.records.encryption import Keyring
from mq.records.records import RecordInput, build_batch
from mq.storage.config import LogConfig
from mq.storage.log import Log

CONFIG = LogConfig(segment_bytes=64 * 1024, max_message_bytes=32 * 1024)


def batch(seq: int, count: int, pid: int = 42, epoch: int = 0) -> bytes:
    records: list[RecordInput] = [
        (None, b"s%d" % (seq + i) + bytes(300), [], 1_000 + i) for i in range(count)
    ]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


@pytest.mark.parametrize("reopen", ["none", "crash", "clean"])
def test_a_retried_batch_gets_its_original_offsets(tmp_path: Path, reopen: str) -> None:
    log = Log.open(tmp_path, CONFIG)
    first = log.append(batch(0, 3))
    log.append(build_batch([(None, b"plain", [], 5)]))  # a non-idempotent producer in between
    # enough batches to roll segments, so snapshots at roll are used too
    for seq in range(3, 3 + 400, 4):
        log.append(batch(seq, 4))
    last_seq = 3 + 400 - 4
    assert len(log.segments) > 2
    end = log.next_offset
    if reopen == "clean":
        log.close()
        log = Log.open(tmp_path, CONFIG)
    elif reopen == "crash":
        log = Log.open(tmp_path, CONFIG)  # the old object is dropped without close
    retried = log.append(batch(last_seq, 4))
    assert (retried.first_offset, retried.last_offset) == (end - 4, end - 1)
    assert log.next_offset == end  # nothing was appended
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(last_seq + 5, 1))  # a gap
    assert log.append(batch(last_seq + 4, 1)).first_offset == end
    assert first.first_offset == 0
    # where the epoch started, far behind the cached batches, survives the reopen
    assert log.producers.producers[42].epoch_start() == 0
    log.close()


def test_truncation_forgets_the_batches_it_removes(tmp_path: Path) -> None:
    log = Log.open(tmp_path, CONFIG)
    log.append(batch(0, 2))
    second = log.append(batch(2, 2))
    log.truncate_to(second.first_offset)
    again = log.append(batch(2, 2))  # no longer a duplicate: it is appended anew
    assert again.first_offset == second.first_offset
    assert log.next_offset == second.last_offset + 1
    log.close()


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_second_writer_on_one_identity_is_refused_not_taken_for_a_retry(
    tmp_path: Path, encrypted: bool
) -> None:
    """Same producer id, epoch and sequences, other records: not a retry. Taken for one,
    its records were dropped and the writer told they were written (two attempts of an
    exactly-once Spark task that got their rows in different orders lost rows so)."""
    keyring = Keyring({1: bytes(range(32))}) if encrypted else None
    log = Log.open(tmp_path, CONFIG, keyring=keyring)
    mine = batch(0, 3)
    theirs = build_batch(
        [(None, b"other rows %d" % i, [], 1_000 + i) for i in range(3)],
        producer_id=42,
        producer_epoch=0,
        base_sequence=0,
    )
    log.append(mine)
    with pytest.raises(OutOfOrderSequenceError, match="two writers"):
        log.append(theirs)
    retried = log.append(mine)  # the same bytes again: a retry, its original offsets
    assert (retried.first_offset, retried.last_offset, log.next_offset) == (0, 2, 3)
    log.close()

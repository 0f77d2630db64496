"""Issue 18, F7: what a partition remembers of idempotent producers is bounded and expires.

The table forgets the least recently written producer past its bound, expiry
forgets producers idle past ``producer_id_expiration_ms``, and a log reopened after
a restart (which rebuilds the table from an older snapshot and the batches after
it) agrees with the table it had once the broker's bounds are applied.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mq.broker.config import BrokerConfig
from mq.broker.producer_ids import bound_log
from mq.errors import UnknownProducerIdError
from mq.records.batch import BatchHeader
from mq.records.records import build_batch
from mq.storage.log import Log
from mq.storage.producers import ProducerStates

DAY_MS = 86_400_000


def header(pid: int, seq: int, ts: int = 1) -> BatchHeader:
    return BatchHeader(0, 100, 0, 2, 0, 0, 0, ts, ts, pid, 0, seq, 1)


def test_past_its_bound_the_table_forgets_the_least_recently_written_producer() -> None:
    states = ProducerStates(max_producers=3)
    for pid in (1, 2, 3):
        states.record(header(pid, 0))
    states.record(header(1, 1))  # producer 1 writes again: 2 is now the oldest
    states.record(header(4, 0))
    assert list(states.producers) == [3, 1, 4]
    assert states.forgotten == 1
    with pytest.raises(UnknownProducerIdError):
        states.check(header(2, 1))  # forgotten: its next sequence is unknown
    assert states.check(header(1, 2)) is None  # remembered: in sequence


def test_bound_expires_and_trims_and_a_snapshot_keeps_the_order() -> None:
    states = ProducerStates()
    for pid, ts in ((1, 100), (2, 5_000), (3, 200), (4, 6_000)):
        states.record(header(pid, 0, ts))
    assert states.bound(max_producers=1, older_than_ms=1_000) == 3  # 1 and 3 expire, 2 trims
    assert list(states.producers) == [4]
    again = ProducerStates.decode(states.encode())
    assert list(again.producers) == [4]


def append(log: Log, pid: int, seq: int, ts: int) -> None:
    batch = build_batch(
        [(None, b"v", [], ts)], producer_id=pid, producer_epoch=0, base_sequence=seq
    )
    log.append(batch)


def test_expired_producers_stay_expired_across_a_restart(tmp_path: Path) -> None:
    """A clean close snapshots the table as it is; after a crash the table is rebuilt
    from an older snapshot and the batches after it, and the bounds the broker applies
    as it opens the log expire the same producers again."""
    config = BrokerConfig(data_dir=tmp_path, producer_id_expiration_ms=DAY_MS)
    now = int(time.time() * 1000)
    for name, crash in (("clean-0", False), ("crash-0", True)):
        log = Log.open(tmp_path / name)
        append(log, 7, 0, now - 2 * DAY_MS)  # idle for two days: expired
        append(log, 8, 0, now)
        log.roll(log.next_offset)  # a snapshot that still holds producer 7
        append(log, 7, 1, now - 2 * DAY_MS)  # and a batch of it after the snapshot
        assert bound_log(log, config) == 1
        assert sorted(log.producers.producers) == [8]
        if not crash:
            log.close()
        reopened = Log.open(tmp_path / name)
        bound_log(reopened, config)  # what the broker does as it opens a log
        assert sorted(reopened.producers.producers) == [8], name
        with pytest.raises(UnknownProducerIdError):
            reopened.producers.check(header(7, 2))
        reopened.close()
        if crash:
            log.close()

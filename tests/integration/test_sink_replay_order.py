"""The exactly-once sink against a real broker: a replay that sees its rows in another
order (as a retried task after a shuffle does) still writes each row exactly once.

An "earlier attempt" of a sink task writes part of its rows under the task's derived
producer identity (what an attempt that died after those acknowledgements leaves),
another producer writes into the same partitions meanwhile, then the "replay" runs
the same task with all its rows shuffled: the topic must hold each row once.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest

from mq.client.producer_states import Resume
from mq.client.sync import SyncAdmin, SyncConsumer, SyncProducer
from mq.client.types import TopicPartition
from spark_connector.exactly_once import TaskIdentity
from spark_connector.options import WriteOptions
from spark_connector.read_back import ReadBackError, read_back
from spark_connector.schema import HEADERS_TYPE
from spark_connector.writer import produce

PARTITIONS = 3
Row = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def task_rows(count: int) -> list[Row]:
    """Keyless rows (some the same), keyed rows, rows with headers."""
    rows: list[Row] = []
    for i in range(count):
        key = None if i % 3 else b"k%d" % (i % 17)
        value = b"same" if i % 10 == 5 else b"v%d" % i
        headers = (("h", b"%d" % (i % 4)),) if i % 4 == 0 else ()
        rows.append((key, value, headers))
    return rows


def arrow(rows: list[Row], per_batch: int = 37) -> Iterator[pa.RecordBatch]:
    for start in range(0, len(rows), per_batch):
        chunk = rows[start : start + per_batch]
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([r[1] for r in chunk], pa.binary()),
                pa.array([r[0] for r in chunk], pa.binary()),
                pa.array([[{"key": k, "value": v} for k, v in r[2]] for r in chunk], HEADERS_TYPE),
            ],
            names=["value", "key", "headers"],
        )


def options(bootstrap: str, topic: str, compression: str | None = None) -> WriteOptions:
    return WriteOptions(
        bootstrap=bootstrap,
        topic=topic,
        request_timeout_ms=30_000,
        linger_ms=1,
        batch_size=4096,
        compression=compression,
    )


def topic_rows(bootstrap: str, topic: str) -> Counter[Row]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    out: Counter[Row] = Counter()
    with SyncConsumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        end = sum(consumer.end_offsets(tps).values())
        while sum(out.values()) < end:
            for records in consumer.poll(timeout_ms=500).values():
                out.update((r.key, r.value, tuple(r.headers)) for r in records)
    return out


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_shuffled_replay_writes_each_row_exactly_once(
    bootstrap: str, compression: str | None
) -> None:
    topic = f"replay-order-{compression}"
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS)
    rows = task_rows(600)
    identity = TaskIdentity(f"write replay-order-test-{compression}", 2, 0)
    # the earlier attempt got its rows in one order and wrote 230 of them
    assert produce(options(bootstrap, topic, compression), arrow(rows[:230]), identity) == 230
    # someone else writes to the same partitions meanwhile (skipped by the read-back)
    with SyncProducer(bootstrap=bootstrap, linger_ms=1) as other:
        for i in range(90):
            other.send(topic, b"other %d" % i, partition=i % PARTITIONS)
        other.flush()
    # the retry gets the same rows in another order: it writes the 370 others only
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    assert produce(options(bootstrap, topic, compression), arrow(shuffled, 53), identity) == 370
    written = topic_rows(bootstrap, topic)
    others = Counter[Row]({(None, b"other %d" % i, ()): 1 for i in range(90)})
    ours = written - others
    lost, twice = Counter(rows) - ours, ours - Counter(rows)
    assert (sum(lost.values()), sum(twice.values())) == (0, 0), "lost, duplicated rows"
    assert ours == Counter(rows)
    assert written & others == others
    # a third attempt (in yet another order) finds everything written: writes nothing
    random.Random(8).shuffle(shuffled)
    assert produce(options(bootstrap, topic, compression), arrow(shuffled), identity) == 0
    assert topic_rows(bootstrap, topic) == written


def test_a_replay_without_rows_the_earlier_attempt_wrote_fails(bootstrap: str) -> None:
    """A non-deterministic query: the retry's rows are not a superset of what was written."""
    topic = "replay-changed"
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS)
    identity = TaskIdentity("write replay-changed-test", 0, 0)
    produce(options(bootstrap, topic), arrow(task_rows(50)), identity)
    changed = [(k, b"other " + (v or b""), h) for k, v, h in task_rows(60)]
    with pytest.raises(RuntimeError, match="not deterministic") as info:
        produce(options(bootstrap, topic), arrow(changed), identity)
    assert "does not have 50 of the rows" in str(info.value)


def test_the_read_back_is_bounded(bootstrap: str) -> None:
    topic = "replay-bounded"
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS)
    identity = TaskIdentity("write replay-bounded-test", 0, 0)
    produce(options(bootstrap, topic), arrow(task_rows(40)), identity)
    bounded = options(bootstrap, topic)
    bounded = WriteOptions(**{**bounded.__dict__, "resume_max_records": 39})
    with pytest.raises(RuntimeError, match="resumeMaxRecords") as info:
        produce(bounded, arrow(task_rows(80)), identity)
    assert "wrote 40 records" in str(info.value)
    assert sum(topic_rows(bootstrap, topic).values()) == 40  # nothing more was written


def test_records_gone_before_the_replay_fail_it_clearly(bootstrap: str) -> None:
    """What the earlier attempt wrote was deleted (retention, delete_records): the replay
    cannot know which rows are written, so it fails saying so and writes nothing."""
    topic = "replay-gone"
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic, 1)
        identity = TaskIdentity("write replay-gone-test", 0, 0)
        produce(options(bootstrap, topic), arrow(task_rows(20)), identity)
        tp = TopicPartition(topic, 0)
        admin.delete_records({tp: 20})
        with pytest.raises(ReadBackError, match="are gone"):
            produce(options(bootstrap, topic), arrow(task_rows(30)), identity)
        assert admin.list_offsets([tp], "latest") == {tp: 20}


async def test_an_unknown_epoch_start_is_refused() -> None:
    """A broker that does not say where the epoch starts (older than the field): no guess."""
    with pytest.raises(ReadBackError, match="does not say where they start"):
        await read_back(options("127.0.0.1:1", "t"), "t", 0, (2**62, 0), Resume(5, -1))

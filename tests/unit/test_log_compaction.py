"""Log compaction (``cleanup.policy=compact``): what a pass keeps, drops and survives.

The central property, checked by a Hypothesis state machine against a dict of
everything appended: whatever mix of appends, rolls, passes, clock moves,
restarts and crashes, reading the log gives records in offset order, each
exactly as appended at its offset; the newest record of every key is there
(a tombstone may go only after ``delete.retention.ms``); and after a pass,
no key appears twice below the pass's end. Besides, a pass cut short at every
file operation of its swap leaves a log that reopens to the same content.
"""

from __future__ import annotations

import errno
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mq.errors import InvalidRecordError, StorageError
from mq.records.batch import DELETE_HORIZON_BIT, parse_header
from mq.records.compression import CODEC_GZIP, CODEC_NONE, CODEC_ZSTD
from mq.records.encryption import Keyring
from mq.records.records import Record, build_batch, decode_records
from mq.storage import cleaner
from mq.storage.config import KiB, LogConfig
from mq.storage.fileio import FileIO
from mq.storage.log import Log

START_MS = 1_700_000_000_000
DELETE_RETENTION_MS = 10_000
CONFIG = LogConfig(
    segment_bytes=64 * KiB,
    index_interval_bytes=1024,
    max_message_bytes=32 * KiB,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.0,
    delete_retention_ms=DELETE_RETENTION_MS,
)


class Clock:
    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


def open_log(directory: Path, clock: Clock, config: LogConfig = CONFIG, **kw: object) -> Log:
    return Log.open(directory, config, clock=clock, **kw)  # type: ignore[arg-type]


def append(log: Log, records: list[tuple[bytes | None, bytes | None]], codec: int = 0) -> int:
    """Append one batch; returns its first offset."""
    now = log.clock()
    batch = build_batch([(k, v, [], now) for k, v in records], codec=codec)
    return log.append(batch).first_offset


def read_all(log: Log) -> list[tuple[Record, int]]:
    """Every record from the log start, with its batch's attributes."""
    out: list[tuple[Record, int]] = []
    offset = log.log_start_offset
    while (found := log.read_plain(offset, 1 << 20)) is not None:
        data, pos = bytes(found.data), 0
        while pos < len(data):
            header = parse_header(data, pos)
            out.extend(
                (r, header.attributes) for r in decode_records(data[pos : pos + header.size])
            )
            pos += header.size
        offset = found.next_offset
    return out


def clean(log: Log) -> cleaner.CleanJob | None:
    job = log.begin_clean()
    if job is None:
        return None
    job.run()
    assert job.error is None, job.error
    assert log.end_clean(job)
    return job


def fill(log: Log, rounds: int, keys: int, *, prefix: bytes = b"k") -> None:
    """``rounds`` one-record batches over ``keys`` keys, values of 600 bytes."""
    for i in range(rounds):
        append(log, [(b"%s%d" % (prefix, i % keys), b"v%d;" % i + b"." * 600)])


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_pass_keeps_the_newest_record_of_each_key(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    fill(log, 600, keys=20)
    log.flush()
    before = log.size_bytes
    job = clean(log)
    assert job is not None
    assert job.records_dropped > 0
    records = [r for r, _ in read_all(log)]
    below = [r for r in records if r.offset < job.state.clean_end]
    assert len({r.key for r in below}) == len(below)  # one per key in the cleaned range
    newest = {b"k%d" % (i % 20): i for i in range(600)}
    assert {r.offset for r in records} >= set(newest.values())
    assert all(r.value is not None and r.value.startswith(b"v%d;" % r.offset) for r in records)
    assert log.size_bytes < before / 3
    assert log.log_start_offset == 0  # compaction never moves the log start
    assert clean(log) is None  # nothing dirty: no pass
    log.close()
    reopened = open_log(tmp_path / "t-0", clock)
    assert [r for r, _ in read_all(reopened)] == records
    assert reopened.begin_clean() is None  # the pass's state survived the restart
    reopened.close()


def test_tombstones_stay_for_delete_retention_then_go(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    append(log, [(b"a", b"1"), (b"b", b"1")])
    append(log, [(b"a", None)])  # delete a
    fill(log, 200, keys=5)  # rolls segments past the tombstone
    log.flush()
    clean(log)
    got = {r.key: (r, attrs) for r, attrs in read_all(log)}
    tombstone, attrs = got[b"a"]
    assert tombstone.value is None
    assert tombstone.offset == 2
    assert tombstone.timestamp == START_MS  # re-encoded, the record's own time
    assert attrs & DELETE_HORIZON_BIT
    assert got[b"b"][0].value == b"1"
    clock.now += DELETE_RETENTION_MS - 1
    assert log.begin_clean() is None  # not dirty, horizon not passed
    clock.now += 1
    clean(log)  # the horizon is due
    keys = {r.key for r, _ in read_all(log)}
    assert b"a" not in keys
    assert b"b" in keys
    log.close()


def test_a_compacted_log_refuses_records_without_a_key(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    with pytest.raises(InvalidRecordError, match="without a key"):
        append(log, [(b"k", b"v"), (None, b"v")])
    assert log.next_offset == 0
    log.close()


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_ZSTD])
def test_rebuilt_batches_keep_offsets_codec_and_producer_fields(
    tmp_path: Path, clock: Clock, codec: int
) -> None:
    log = open_log(tmp_path / "t-0", clock)
    batch = build_batch(
        [(b"k%d" % (i % 3), b"v%d" % i, [("h", b"x")], START_MS + i) for i in range(9)],
        codec=codec,
        producer_id=7,
        producer_epoch=1,
        base_sequence=0,
    )
    log.append(batch)
    fill(log, 150, keys=2, prefix=b"other")
    log.flush()
    clean(log)
    first = log.read(0, 1)
    assert first is not None
    header = parse_header(first.data)
    assert (header.base_offset, header.last_offset_delta) == (0, 8)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 0)
    assert header.codec == codec
    records = decode_records(first.data[: header.size])
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records] == [
        (i, b"k%d" % (i % 3), b"v%d" % i, START_MS + i, (("h", b"x"),)) for i in (6, 7, 8)
    ]
    log.close()


def test_reading_a_compacted_offset_gives_the_next_record(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    fill(log, 300, keys=4)
    log.flush()
    clean(log)
    found = log.read(5, 1 << 20)  # offset 5 was compacted away
    assert found is not None
    assert found.first_offset > 5
    log.close()


def test_ratio_decides_when_a_pass_is_due(tmp_path: Path, clock: Clock) -> None:
    config = replace(CONFIG, min_cleanable_dirty_ratio=0.5)
    log = open_log(tmp_path / "t-0", clock, config)
    fill(log, 300, keys=300)  # unique keys: a pass keeps everything
    log.flush()
    job = clean(log)
    assert job is not None
    assert job.records_dropped == 0
    fill(log, 40, keys=300)  # less dirty than clean: not due
    log.flush()
    assert log.begin_clean() is None
    fill(log, 400, keys=300)
    log.flush()
    assert log.begin_clean() is not None
    log.close()


def test_min_compaction_lag_keeps_young_segments(tmp_path: Path, clock: Clock) -> None:
    config = replace(CONFIG, min_compaction_lag_ms=60_000)
    log = open_log(tmp_path / "t-0", clock, config)
    fill(log, 300, keys=4)
    log.flush()
    assert log.begin_clean() is None
    clock.now += 60_000
    assert clean(log) is not None
    log.close()


def test_a_pass_is_dropped_when_retention_changed_the_log(tmp_path: Path, clock: Clock) -> None:
    config = replace(CONFIG, cleanup_policy="compact,delete", retention_bytes=100 * KiB)
    log = open_log(tmp_path / "t-0", clock, config)
    fill(log, 300, keys=4)
    log.flush()
    job = log.begin_clean()
    assert job is not None
    job.run()
    assert log.enforce_retention() > 0  # the first segments went meanwhile
    assert not log.end_clean(job)
    assert not any((tmp_path / "t-0" / cleaner.CLEANED_DIR).iterdir())
    assert all(r.value is not None for r, _ in read_all(log))
    log.close()


def test_compact_only_logs_ignore_retention(tmp_path: Path, clock: Clock) -> None:
    config = replace(CONFIG, retention_ms=1)
    log = open_log(tmp_path / "t-0", clock, config)
    fill(log, 300, keys=300)
    clock.now += 10_000
    assert log.enforce_retention() == 0
    assert log.next_offset == 300
    assert len(read_all(log)) == 300
    log.close()


@dataclass
class CrashingIO(FileIO):
    """Fails the ``fail_at``-th swap-side operation (rename, unlink, fsync_dir, atomic write)."""

    fail_at: int = 0
    calls: int = 0
    armed: bool = False
    seen: list[str] = field(default_factory=list)

    def _step(self, op: str) -> None:
        if not self.armed:
            return
        self.calls += 1
        self.seen.append(op)
        if self.calls == self.fail_at:
            raise OSError(errno.EIO, f"injected failure at {op}")

    def rename(self, source: Path, target: Path) -> None:
        self._step("rename")
        super().rename(source, target)

    def unlink(self, path: Path) -> None:
        self._step("unlink")
        super().unlink(path)

    def fsync_dir(self, path: Path) -> None:
        self._step("fsync_dir")
        super().fsync_dir(path)


def test_a_swap_cut_short_anywhere_reopens_to_the_same_content(tmp_path: Path) -> None:
    """Fail each file operation of the swap in turn; the reopened log reads the same."""
    fail_at = 1
    while True:
        clock = Clock()
        directory = tmp_path / f"run{fail_at}" / "t-0"
        io = CrashingIO(fail_at=fail_at)
        log = open_log(directory, clock, io=io)
        fill(log, 400, keys=6)
        append(log, [(b"k1", None)])
        fill(log, 200, keys=3)
        log.flush()
        expected = [(r.offset, r.key, r.value) for r, _ in read_all(log)]
        job = log.begin_clean()
        assert job is not None
        job.run()
        io.armed = True
        try:
            log.end_clean(job)
            finished = True
        except StorageError:
            finished = False
            assert log.offline is not None
        io.armed = False
        for segment in log.segments:
            segment.abandon()  # kill -9
        reopened = open_log(directory, clock)
        got = [(r.offset, r.key, r.value) for r, _ in read_all(reopened)]
        newest = {key: (offset, key, value) for offset, key, value in expected}
        assert set(newest.values()) <= set(got) <= set(expected)
        assert [offset for offset, _, _ in got] == sorted(offset for offset, _, _ in got)
        assert not (directory / cleaner.MANIFEST).exists()
        assert not any((directory / cleaner.CLEANED_DIR).iterdir())
        reopened.close()
        if finished:
            break
        fail_at += 1
    assert fail_at > 5  # the swap really was cut at several points


# -- the model ----------------------------------------------------------------------

KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]


class CompactedLogMachine(RuleBasedStateMachine):
    """A compacted log against a dict of every record appended (offset → key, value, time)."""

    keyring: Keyring | None = None
    """Encryption at rest (the encrypted twin below sets it)."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.directory = Path(self.tmp.name) / "t-0"
        self.clock = Clock()
        self.appended: dict[int, tuple[bytes, bytes | None, int]] = {}
        self.cleaned_end = 0

    @initialize()
    def start(self) -> None:
        self.log = open_log(self.directory, self.clock, keyring=self.keyring)

    def teardown(self) -> None:
        if self.log.offline is None:
            self.log.close()
        self.tmp.cleanup()

    @rule(
        records=st.lists(
            st.tuples(st.sampled_from(KEYS), st.none() | st.integers(100, 3000)),
            min_size=1,
            max_size=8,
        ),
        codec=st.sampled_from([CODEC_NONE, CODEC_ZSTD]),
    )
    def append(self, records: list[tuple[bytes, int | None]], codec: int) -> None:
        payload = [(k, None if n is None else b"%s=" % k + bytes(n)) for k, n in records]
        first = append(self.log, payload, codec)
        for i, (key, value) in enumerate(payload):
            self.appended[first + i] = (key, value, self.clock.now)

    @rule()
    def flush(self) -> None:
        self.log.flush()

    @rule()
    def clean(self) -> None:
        job = self.log.begin_clean()
        if job is None:
            return
        job.run()
        assert self.log.end_clean(job)
        end = job.state.clean_end
        below = [r.key for r, _ in read_all(self.log) if r.offset < end]
        assert len(below) == len(set(below))

    @rule(ms=st.integers(0, 2 * DELETE_RETENTION_MS))
    def tick(self, ms: int) -> None:
        self.clock.now += ms

    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        if crash:
            for segment in self.log.segments:
                segment.abandon()
        else:
            self.log.close()
        self.log = open_log(self.directory, self.clock, keyring=self.keyring)

    @invariant()
    def reads_back(self) -> None:
        if not hasattr(self, "log"):
            return
        got = read_all(self.log)
        offsets = [r.offset for r, _ in got]
        assert offsets == sorted(set(offsets))
        for record, _ in got:
            key, value, _ = self.appended[record.offset]
            assert (record.key, record.value) == (key, value)
        present = set(offsets)
        newest: dict[bytes, int] = {}
        for offset, (key, _, _) in sorted(self.appended.items()):
            newest[key] = offset
        for key, offset in newest.items():
            _, value, at = self.appended[offset]
            gone_ok = value is None and self.clock.now >= at + DELETE_RETENTION_MS
            assert offset in present or gone_ok, (key, offset)


TestCompactedLog = CompactedLogMachine.TestCase
TestCompactedLog.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


class EncryptedCompactedLogMachine(CompactedLogMachine):
    """The same model on a log that encrypts at rest, with key rotations between steps:
    whatever was sealed under any key reads back the same, and passes re-seal."""

    def __init__(self) -> None:
        self.keyring = Keyring({1: bytes(range(32))})
        super().__init__()

    @rule()
    def rotate(self) -> None:
        keys = {n: bytes([n % 256]) * 32 for n in self.keyring.ids}
        newest = self.keyring.newest + 1
        keys[newest] = bytes([newest % 256]) * 32
        keys[1] = bytes(range(32))
        self.keyring.replace(keys)


TestEncryptedCompactedLog = EncryptedCompactedLogMachine.TestCase
TestEncryptedCompactedLog.settings = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

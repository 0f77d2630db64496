"""Sealed segments serve index lookups from maps of their index files.

A sealed segment (rolled, or opened from disk and not the last one) drops its
index entries from memory; every read, offset lookup and timestamp lookup
must answer exactly as it did from the in-memory entries, and a segment that
becomes active again (the last one after a restart, a follower's truncation)
must append, truncate and persist as before. The reference answers come from
the same segment before it was sealed, or from indexes rebuilt from the log.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import as_stored, make_batch

from mq.records.batch import iter_batches
from mq.storage.config import KiB, LogConfig
from mq.storage.fileio import DEFAULT_IO
from mq.storage.log import Log
from mq.storage.segment import Segment

TS = 1_700_000_000_000
CAPACITY = 1 << 20
CONFIG = LogConfig(segment_bytes=64 * KiB, index_interval_bytes=512, max_message_bytes=32 * KiB)
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# (records, value size, timestamp step from the previous batch: may go back)
batch_specs = st.lists(
    st.tuples(st.integers(1, 8), st.sampled_from([0, 30, 300, 1200]), st.integers(-50, 80)),
    min_size=0,
    max_size=40,
)


def append_batches(segment: Segment, specs: list[tuple[int, int, int]], ts: int) -> int:
    """Append one batch per spec from the segment's next offset; the last timestamp used."""
    for count, value_size, step in specs:
        ts += step
        raw = make_batch(segment.next_offset, count, timestamp=ts, value_size=value_size, step=3)
        segment.append(raw, list(iter_batches(raw)), (segment.next_offset, 0))
    return ts


def answers(segment: Segment, stamps: list[int]) -> list[object]:
    """Every lookup a log makes of a segment, for every offset and the stamps given."""
    offsets = range(segment.base_offset, segment.next_offset + 1)
    reads = []
    for offset in offsets:
        for max_bytes in (1, 2000):
            got = segment.read(offset, max_bytes, segment.next_offset)
            reads.append(None if got is None else (bytes(got.data), got[1], got[2]))
    return [
        reads,
        [segment.position_of(o) for o in offsets],
        [segment.find_timestamp(t, f) for t in stamps for f in offsets[::3]],
        segment.next_offset,
        segment.max_timestamp,
    ]


def probe_stamps(first: int, last: int) -> list[int]:
    return [first - 100, *range(first - 60, last + 60, 7), last + 100]


def in_memory_entries(segment: Segment) -> int:
    return sum(
        len(arr)
        for index in (segment.offset_index, segment.time_index)
        for arr in (index._keys, index._values)
        if arr is not None
    )


def assert_released(segment: Segment) -> None:
    for index in (segment.offset_index, segment.time_index):
        assert index.released
        assert index._keys is None
        assert index._values is None


@SETTINGS
@given(specs=batch_specs, more=batch_specs, interval=st.sampled_from([1, 200, 4096]))
def test_sealed_segment_answers_as_before(
    specs: list[tuple[int, int, int]], more: list[tuple[int, int, int]], interval: int
) -> None:
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        segment = Segment.create(directory, 100, DEFAULT_IO, interval, CAPACITY)
        last_ts = append_batches(segment, specs, TS)
        stamps = probe_stamps(TS, last_ts)
        before = answers(segment, stamps)
        segment.seal()
        assert_released(segment)
        assert answers(segment, stamps) == before
        assert in_memory_entries(segment) == 0  # the lookups read the maps
        segment.close()

        reopened = Segment.open_trusted(directory, 100, DEFAULT_IO, interval)
        assert_released(reopened)
        assert answers(reopened, stamps) == before

        # the last segment after a restart: appends again, then seals again
        reopened.make_active(CAPACITY)
        last_ts = append_batches(reopened, more, last_ts)
        stamps = probe_stamps(TS, last_ts)
        after = answers(reopened, stamps)
        reopened.close()
        assert_released(reopened)
        assert answers(reopened, stamps) == after
        reopened.close()

        # the reference: indexes rebuilt from the log alone
        for suffix in (".index", ".timeindex"):
            (directory / f"{100:020d}{suffix}").unlink()
        rebuilt = Segment.open_trusted(directory, 100, DEFAULT_IO, interval)
        assert answers(rebuilt, stamps) == after
        rebuilt.close()


@SETTINGS
@given(specs=batch_specs.filter(lambda s: len(s) > 3), data=st.data())
def test_truncating_a_reopened_segment(
    specs: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    """A follower truncating into a sealed segment makes it active: its indexes come back."""
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        segment = Segment.create(directory, 0, DEFAULT_IO, 200, CAPACITY)
        last_ts = append_batches(segment, specs, TS)
        segment.seal()
        segment.offset_index.position_for(10**6)  # map the files before the rewrite
        segment.time_index.start_offset_for(TS)
        cut = data.draw(st.integers(0, segment.next_offset))
        segment.make_active(CAPACITY)
        segment.truncate_to(cut)
        assert not segment.offset_index.released
        assert segment.offset_index._map is None
        assert segment.time_index._map is None
        last_ts = append_batches(segment, specs[:2], last_ts)
        stamps = probe_stamps(TS, last_ts)
        expected = answers(segment, stamps)
        segment.close()
        assert answers(segment, stamps) == expected
        reopened = Segment.open_trusted(directory, 0, DEFAULT_IO, 200)
        assert answers(reopened, stamps) == expected
        reopened.close()


def test_log_keeps_index_entries_of_the_active_segment_only(tmp_path: Path) -> None:
    log = Log.open(tmp_path, CONFIG)
    stored: list[tuple[int, bytes, int]] = []  # (first offset, bytes as stored, timestamp)
    for n in range(300):
        ts = TS + 10 * n
        raw = make_batch(log.next_offset, 3, timestamp=ts, value_size=400)
        info = log.append(raw)
        stored.append((info.first_offset, as_stored(raw, info.first_offset), ts))

    def check(log: Log) -> None:
        *sealed, active = log.segments
        assert len(sealed) >= 3
        for segment in sealed:
            assert_released(segment)
        # the active one holds entries once it has appended (after a reopen: its first append)
        assert active.active
        offset = 0
        got = []
        while offset < log.next_offset:
            found = log.read(offset, 1)
            assert found is not None
            got.append(bytes(found.data))
            offset = found.next_offset
        assert got == [data for _, data, _ in stored]
        for first, _, ts in stored[::7]:
            assert log.offset_for_timestamp(ts) == (first, ts)
            assert log.offset_for_timestamp(ts + 1) == (first + 1, ts + 1)
        assert log.offset_for_timestamp(TS + 10 * len(stored)) is None
        for segment in sealed:
            assert in_memory_entries(segment) == 0

    check(log)
    log.close()
    log = Log.open(tmp_path, CONFIG)
    check(log)

    # a follower's truncation into a sealed segment, then more appends and a roll
    cut = stored[len(stored) // 3][0] + 1
    log.truncate_to(cut)
    while stored and stored[-1][0] + 3 > cut:
        stored.pop()
    for n in range(len(stored), 300):
        ts = TS + 10 * n
        raw = make_batch(log.next_offset, 3, timestamp=ts, value_size=400)
        info = log.append(raw)
        stored.append((info.first_offset, as_stored(raw, info.first_offset), ts))
    check(log)
    log.close()
    log = Log.open(tmp_path, CONFIG)
    check(log)
    log.close()

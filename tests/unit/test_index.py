"""OffsetIndex and TimeIndex held against a sorted list searched with ``bisect``.

The reference model is two Python lists; every lookup the segment uses is
computed on the lists with :mod:`bisect` and compared. Files are checked by
reading them back into a fresh index and by damaging them on purpose.
"""

from __future__ import annotations

import struct
import tempfile
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from mq.storage.fileio import DEFAULT_IO
from mq.storage.index import OffsetIndex, SparseIndex, TimeIndex

U32 = 2**32 - 1


@contextmanager
def scratch_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


@st.composite
def offset_entries(draw: st.DrawFn, max_size: int = 60) -> list[tuple[int, int]]:
    """Strictly increasing relative offsets and strictly increasing positions."""
    n = draw(st.integers(0, max_size))
    keys = sorted(draw(st.sets(st.integers(0, U32), min_size=n, max_size=n)))
    positions = sorted(draw(st.sets(st.integers(0, 2**31 - 2), min_size=n, max_size=n)))
    return list(zip(keys, positions, strict=True))


@st.composite
def time_entries(draw: st.DrawFn, max_size: int = 60) -> list[tuple[int, int]]:
    """Strictly increasing timestamps and non-decreasing relative offsets."""
    n = draw(st.integers(0, max_size))
    stamps = sorted(draw(st.sets(st.integers(-1, 2**62), min_size=n, max_size=n)))
    offsets = sorted(draw(st.lists(st.integers(0, U32), min_size=n, max_size=n)))
    return list(zip(stamps, offsets, strict=True))


IndexT = TypeVar("IndexT", bound=SparseIndex)


def filled(index: IndexT, entries: list[tuple[int, int]]) -> IndexT:
    for key, value in entries:
        index.append(key, value)
    return index


def entries_of(index: SparseIndex) -> list[tuple[int, int]]:
    return list(zip(index.keys, index.values, strict=True))


# -- lookups ---------------------------------------------------------------------


@given(entries=offset_entries(), probes=st.lists(st.integers(-5, U32), max_size=30))
def test_offset_index_floor_matches_bisect(
    entries: list[tuple[int, int]], probes: list[int]
) -> None:
    index = filled(OffsetIndex(Path("/nonexistent/x.index"), DEFAULT_IO), entries)
    keys = [k for k, _ in entries]
    positions = [v for _, v in entries]
    # probe the keys themselves and their neighbours, where off-by-ones live
    for probe in probes + [k + d for k in keys[:10] for d in (-1, 0, 1)]:
        i = bisect_right(keys, probe) - 1
        assert index.floor(probe) == (i if i >= 0 else None)
        assert index.position_for(probe) == (positions[i] if i >= 0 else 0)
    for position in [*probes, *(p + d for p in positions[:10] for d in (-1, 0, 1))]:
        assert index.count_before_position(position) == bisect_left(positions, position)


@given(entries=time_entries(), probes=st.lists(st.integers(-5, 2**62 + 5), max_size=30))
def test_time_index_lookup_matches_bisect(
    entries: list[tuple[int, int]], probes: list[int]
) -> None:
    index = filled(TimeIndex(Path("/nonexistent/x.timeindex"), DEFAULT_IO), entries)
    stamps = [k for k, _ in entries]
    offsets = [v for _, v in entries]
    for probe in probes + [t + d for t in stamps[:10] for d in (-1, 0, 1)]:
        # the last entry stamped strictly below the probe: everything up to its
        # batch is older than the probe, so a scan may start there
        i = bisect_left(stamps, probe) - 1
        assert index.start_offset_for(probe) == (offsets[i] if i >= 0 else 0)
    for rel in [*(p for p in probes if p <= U32), *(o + d for o in offsets[:10] for d in (0, 1))]:
        assert index.count_below_offset(rel) == bisect_left(offsets, rel)
    assert index.max_timestamp == (stamps[-1] if stamps else -1)


# -- keep, persist, read_file ----------------------------------------------------


class IndexFileMachine(RuleBasedStateMachine):
    """Appends, truncations, persists and reloads of one offset index and one time index.

    The model is the list of entries in memory and the list of entries the file
    should hold after the last persist.
    """

    @initialize()
    def setup(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        directory = Path(self._tmp.name)
        self.offsets = OffsetIndex(directory / "0.index", DEFAULT_IO)
        self.times = TimeIndex(directory / "0.timeindex", DEFAULT_IO)
        self.model_offsets: list[tuple[int, int]] = []
        self.model_times: list[tuple[int, int]] = []
        self.file_offsets: list[tuple[int, int]] | None = None
        self.file_times: list[tuple[int, int]] | None = None

    def teardown(self) -> None:
        self._tmp.cleanup()

    @rule(step=st.integers(1, 5000), gap=st.integers(1, 70_000))
    def append(self, step: int, gap: int) -> None:
        key = self.model_offsets[-1][0] + step if self.model_offsets else step - 1
        position = self.model_offsets[-1][1] + gap if self.model_offsets else 0
        self.offsets.append(key, position)
        self.model_offsets.append((key, position))
        stamp = self.model_times[-1][0] + gap if self.model_times else gap
        self.times.append(stamp, key)
        self.model_times.append((stamp, key))

    @rule(data=st.data())
    def keep(self, data: st.DataObject) -> None:
        count = data.draw(st.integers(0, len(self.model_offsets) + 2))
        self.offsets.keep(count)
        self.times.keep(count)
        del self.model_offsets[count:]
        del self.model_times[count:]

    @rule()
    def persist(self) -> None:
        self.offsets.persist()
        self.times.persist()
        self.file_offsets = list(self.model_offsets)
        self.file_times = list(self.model_times)

    @precondition(lambda self: self.file_offsets is not None)
    @rule()
    def reload(self) -> None:
        """A fresh index reads exactly what the last persist wrote."""
        for fresh, expected in (
            (OffsetIndex(self.offsets.path, DEFAULT_IO), self.file_offsets),
            (TimeIndex(self.times.path, DEFAULT_IO), self.file_times),
        ):
            assert fresh.read_file()
            assert entries_of(fresh) == expected
            assert fresh.increasing()
        assert self.file_offsets is not None
        log_size = self.file_offsets[-1][1] + 1 if self.file_offsets else 0
        loaded = OffsetIndex(self.offsets.path, DEFAULT_IO)
        assert loaded.read_file()
        assert loaded.plausible(log_size)
        assert not loaded.plausible(log_size - 1) or not self.file_offsets

    @precondition(lambda self: self.file_offsets is not None)
    @rule()
    def reopen_and_continue(self) -> None:
        """Load the file into the live objects; later persists must extend it correctly."""
        assert self.offsets.read_file()
        assert self.times.read_file()
        self.model_offsets = list(self.file_offsets or [])
        self.model_times = list(self.file_times or [])

    @rule()
    def rewrite(self) -> None:
        """mark_rewrite: the next persist must replace the file as a whole."""
        self.offsets.mark_rewrite()
        self.times.mark_rewrite()

    @rule()
    def release(self) -> None:
        """Serve from the file's map: it is persisted first; every later change reloads."""
        self.offsets.release()
        self.times.release()
        self.file_offsets = list(self.model_offsets)
        self.file_times = list(self.model_times)
        assert self.offsets.released
        assert self.times.released

    @rule()
    def close_map(self) -> None:
        """A segment closed (or about to delete its files): the next lookup maps again."""
        self.offsets.close_map()
        self.times.close_map()

    @invariant()
    def memory_matches_model(self) -> None:
        assert entries_of(self.offsets) == self.model_offsets
        assert entries_of(self.times) == self.model_times
        assert self.offsets.increasing()
        assert self.times.increasing()


TestIndexFile = IndexFileMachine.TestCase
TestIndexFile.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


@given(entries=offset_entries(max_size=20), cut=st.integers(1, 7))
def test_partial_entry_is_rejected(entries: list[tuple[int, int]], cut: int) -> None:
    with scratch_dir() as directory:
        index = filled(OffsetIndex(directory / "0.index", DEFAULT_IO), entries)
        index.persist()
        raw = index.path.read_bytes()
        assert len(raw) == 8 * len(entries)
        index.path.write_bytes(raw + b"\x01" * cut)
        assert not OffsetIndex(index.path, DEFAULT_IO).read_file()
        if raw:
            index.path.write_bytes(raw[:-cut])
            assert not OffsetIndex(index.path, DEFAULT_IO).read_file()


def test_missing_file_is_not_read(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", DEFAULT_IO)
    assert not index.read_file()
    assert len(index) == 0
    index.delete_file()  # deleting a missing file is not an error


def write_entries(path: Path, fmt: str, entries: list[tuple[int, int]]) -> None:
    path.write_bytes(b"".join(struct.pack(fmt, k, v) for k, v in entries))


@pytest.mark.parametrize(
    ("entries", "log_size", "ok"),
    [
        ([], 0, True),
        ([(0, 0)], 1, True),
        ([(0, 0), (3, 100), (9, 4000)], 4001, True),
        ([(0, 0)], 0, False),  # a position in an empty log
        ([(0, 0), (3, 100), (9, 4000)], 4000, False),  # last position past the log
        ([(0, 0), (3, 100), (3, 200)], 4000, False),  # repeated offset
        ([(0, 0), (5, 100), (3, 200)], 4000, False),  # offset goes back
        ([(0, 0), (3, 100), (9, 100)], 4000, False),  # repeated position
        ([(0, 0), (3, 200), (9, 100)], 4000, False),  # position goes back
    ],
)
def test_offset_index_plausible(
    tmp_path: Path, entries: list[tuple[int, int]], log_size: int, ok: bool
) -> None:
    path = tmp_path / "0.index"
    write_entries(path, ">II", entries)
    index = OffsetIndex(path, DEFAULT_IO)
    assert index.read_file()
    assert entries_of(index) == entries
    assert index.plausible(log_size) is ok


@pytest.mark.parametrize(
    ("entries", "ok"),
    [
        ([(5, 0), (7, 0), (9, 3)], True),  # offsets may repeat: only stamps must rise
        ([(5, 0), (5, 1)], False),
        ([(9, 0), (5, 1)], False),
        ([(5, 4), (7, 3)], False),
    ],
)
def test_time_index_increasing(tmp_path: Path, entries: list[tuple[int, int]], ok: bool) -> None:
    path = tmp_path / "0.timeindex"
    write_entries(path, ">qI", entries)
    index = TimeIndex(path, DEFAULT_IO)
    assert index.read_file()
    assert index.increasing() is ok


@given(garbage=st.binary(min_size=16, max_size=400))
def test_garbage_is_never_plausible_unless_it_is_ordered(garbage: bytes) -> None:
    """Whatever bytes a damaged file holds, plausible() agrees with a direct check."""
    with scratch_dir() as directory:
        path = directory / "0.index"
        path.write_bytes(garbage)
        index = OffsetIndex(path, DEFAULT_IO)
        if len(garbage) % 8:
            assert not index.read_file()
            return
        assert index.read_file()
        pairs = list(struct.iter_unpack(">II", garbage))
        log_size = 1 << 31
        ordered = all(a[0] < b[0] and a[1] < b[1] for a, b in pairwise(pairs))
        assert index.plausible(log_size) is (ordered and pairs[-1][1] < log_size)


# -- released indexes: lookups from the file's map ------------------------------------


def offset_answers(index: OffsetIndex, probes: list[int]) -> list[object]:
    """Every answer an offset index gives, as the segment asks for them."""
    keys = list(index.keys)
    positions = list(index.values)
    near = [k + d for k in keys for d in (-1, 0, 1)] + [p + d for p in positions for d in (0, 1)]
    log_sizes = [0, 1, *(p + d for p in positions[-1:] for d in (0, 1))]
    return [
        entries_of(index),
        len(index),
        index.increasing(),
        [index.plausible(size) for size in log_sizes],
        [(index.floor(p), index.position_for(p)) for p in [*probes, *near]],
        [index.count_before_position(p) for p in [*probes, *near]],
        index.keys[-1] if len(index) else None,
    ]


def time_answers(index: TimeIndex, probes: list[int]) -> list[object]:
    stamps = list(index.keys)
    offsets = list(index.values)
    near = [t + d for t in stamps for d in (-1, 0, 1)]
    return [
        entries_of(index),
        len(index),
        index.increasing(),
        index.max_timestamp,
        [(index.floor(p), index.start_offset_for(p)) for p in [*probes, *near]],
        [index.count_below_offset(o + d) for o in [0, *offsets] for d in (0, 1)],
        index.values[-1] if len(index) else None,
    ]


def assert_no_entries_in_memory(index: SparseIndex) -> None:
    assert index.released
    assert index._keys is None
    assert index._values is None


@given(
    offsets=offset_entries(),
    times=time_entries(),
    probes=st.lists(st.integers(-5, 2**62 + 5), max_size=30),
)
def test_released_index_answers_as_before(
    offsets: list[tuple[int, int]], times: list[tuple[int, int]], probes: list[int]
) -> None:
    with scratch_dir() as directory:
        offset_index = filled(OffsetIndex(directory / "0.index", DEFAULT_IO), offsets)
        time_index = filled(TimeIndex(directory / "0.timeindex", DEFAULT_IO), times)
        offset_probes = [p for p in probes if p <= U32]
        before = offset_answers(offset_index, offset_probes), time_answers(time_index, probes)
        offset_index.persist()
        offset_index.release()
        time_index.release()  # persists what the file does not have yet itself
        for index in (offset_index, time_index):
            assert_no_entries_in_memory(index)
            assert index._map is None  # mapped on the first lookup, not before
        after = offset_answers(offset_index, offset_probes), time_answers(time_index, probes)
        assert after == before
        for index in (offset_index, time_index):
            assert_no_entries_in_memory(index)  # lookups did not bring the entries back
            assert (index._map is not None) is bool(len(index))  # an empty file: no map
        # the mapped columns behave as sequences, negative indexes included
        for column, entries, field in (
            (offset_index.keys, offsets, 0),
            (time_index.values, times, 1),
        ):
            n = len(entries)
            for i in range(-n - 2, n + 2):
                if -n <= i < n:
                    assert column[i] == entries[i][field]
                else:
                    with pytest.raises(IndexError):
                        column[i]
            assert column[1:-1] == [e[field] for e in entries[1:-1]]
        offset_index.close_map()
        time_index.close_map()
        assert offset_index._map is None
        assert time_index._map is None
        assert offset_answers(offset_index, offset_probes) == before[0]  # maps again


@given(
    entries=offset_entries(max_size=40),
    more=st.integers(0, 10),
    cut=st.integers(0, 60),
)
def test_released_index_can_be_appended_to_and_cut_again(
    entries: list[tuple[int, int]], more: int, cut: int
) -> None:
    """A sealed segment made active again (the last one after a restart) appends and truncates."""
    with scratch_dir() as directory:
        index = filled(OffsetIndex(directory / "0.index", DEFAULT_IO), entries)
        index.release()
        # map it, so that the append has a map to close
        assert list(index.keys[-1:]) == [k for k, _ in entries[-1:]]
        key, position = entries[-1] if entries else (-1, -1)
        added = [(key + 1 + i, position + 1 + 10 * i) for i in range(more) if key + 1 + i <= U32]
        filled(index, added)
        expected = [*entries, *added]
        if added:
            assert not index.released
            assert index._map is None
        assert entries_of(index) == expected
        index.keep(cut)
        del expected[cut:]
        index.persist()
        fresh = OffsetIndex(index.path, DEFAULT_IO)
        assert fresh.read_file()
        assert entries_of(fresh) == expected
        index.release()
        assert entries_of(index) == expected


def test_released_empty_index(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", DEFAULT_IO)
    index.release()  # writes the empty file
    assert index.path.read_bytes() == b""
    assert_no_entries_in_memory(index)
    assert len(index) == 0
    assert list(index.keys) == []
    assert index.max_timestamp == -1
    assert index.floor(5) is None
    assert index.start_offset_for(5) == 0
    assert index._map is None
    index.append(7, 0)
    assert entries_of(index) == [(7, 0)]


def test_released_index_cleared_and_reread(tmp_path: Path) -> None:
    index = filled(OffsetIndex(tmp_path / "0.index", DEFAULT_IO), [(0, 0), (4, 100), (9, 300)])
    index.release()
    assert index.position_for(5) == 100
    index.clear()  # a truncation to the segment's start: nothing to read back
    assert not index.released
    assert index._map is None
    assert len(index) == 0
    index.persist()
    assert index.path.read_bytes() == b""
    write_entries(index.path, ">II", [(0, 0), (2, 50)])
    index.release()
    assert index.read_file()
    assert entries_of(index) == [(0, 0), (2, 50)]


def test_released_index_mark_rewrite_keeps_entries(tmp_path: Path) -> None:
    index = filled(OffsetIndex(tmp_path / "0.index", DEFAULT_IO), [(0, 0), (4, 100)])
    index.release()
    index.mark_rewrite()
    assert entries_of(index) == [(0, 0), (4, 100)]
    index.path.write_bytes(b"junk")
    index.persist()
    assert list(struct.iter_unpack(">II", index.path.read_bytes())) == [(0, 0), (4, 100)]


def test_released_index_delete_file_unmaps(tmp_path: Path) -> None:
    index = filled(OffsetIndex(tmp_path / "0.index", DEFAULT_IO), [(0, 0), (4, 100)])
    index.release()
    assert index.position_for(9) == 100
    assert index._map is not None
    assert str(index.path) in Path("/proc/self/maps").read_text()
    index.delete_file()
    assert index._map is None
    assert str(index.path) not in Path("/proc/self/maps").read_text()  # unmapped
    assert not index.path.exists()
    assert len(index) == 0
    assert index.position_for(9) == 0

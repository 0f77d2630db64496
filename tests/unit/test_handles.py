"""The process-wide caches of open segment files and sealed segments' maps (issue 18, F2).

The file cache keeps at most its capacity of unpinned descriptors, closes the
least recently used first, never closes a pinned one, and survives EMFILE by
closing what it holds. The map cache drops the least recently used maps, and a
slice borrowed from a dropped map stays valid. Logs built over both keep a
bounded number of descriptors however many partitions and segments they have.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_helpers import make_batch

from mq.errors import StorageError
from mq.storage import handles
from mq.storage.config import KiB, LogConfig
from mq.storage.fileio import FileIO
from mq.storage.handles import FileCache, FileHandle, MapCache
from mq.storage.log import Log

CONFIG = LogConfig(segment_bytes=64 * KiB, index_interval_bytes=512, max_message_bytes=32 * KiB)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def is_open(fd: int, path: Path) -> bool:
    """Whether ``fd`` is open on ``path`` (a closed number may be reused for another file)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == str(path)
    except FileNotFoundError:
        return False


@pytest.fixture
def files(tmp_path: Path) -> Iterator[list[FileHandle]]:
    io = FileIO()
    made = []
    for n in range(6):
        path = tmp_path / f"f{n}"
        path.write_bytes(b"x")
        made.append(FileHandle(path, io))
    yield made
    for handle in made:
        if handle.fd is not None:
            os.close(handle.fd)


@pytest.fixture
def small_caches() -> Iterator[None]:
    """Shrink the process's caches for one test, then put them back."""
    files, maps = handles.FILES.capacity, handles.MAPS.capacity
    yield
    handles.configure(files, maps)


def use(cache: FileCache, handle: FileHandle) -> int:
    with cache.use(handle) as fd:
        return fd


def test_file_cache_closes_the_least_recently_used(files: list[FileHandle]) -> None:
    cache = FileCache(2)
    a, b, c, d = files[:4]
    fd_a = use(cache, a)
    use(cache, b)
    use(cache, a)  # a is now more recent than b
    use(cache, c)
    assert b.fd is None
    assert a.fd == fd_a
    assert c.fd is not None
    use(cache, d)
    assert a.fd is None
    assert c.fd is not None
    assert d.fd is not None
    assert not is_open(fd_a, a.path)
    assert len(cache) == 2
    assert cache.evictions == 2


def test_file_cache_reopens_an_evicted_file(files: list[FileHandle]) -> None:
    cache = FileCache(1)
    a, b = files[:2]
    with cache.use(a) as fd:
        os.pwrite(fd, b"abc", 0)
    use(cache, b)
    assert a.fd is None
    with cache.use(a) as fd:
        assert os.pread(fd, 3, 0) == b"abc"
    assert cache.opens == 3


def test_file_cache_never_closes_a_pinned_descriptor(files: list[FileHandle]) -> None:
    cache = FileCache(1)
    a, b, c = files[:3]
    fd_a = cache.pin(a)
    use(cache, b)
    use(cache, c)
    assert a.fd == fd_a
    assert is_open(fd_a, a.path)
    cache.unpin(a)
    use(cache, b)
    assert a.fd is None
    assert not is_open(fd_a, a.path)
    assert len(cache) == 1


def test_forget_while_pinned_closes_at_the_last_unpin(files: list[FileHandle]) -> None:
    cache = FileCache(4)
    a = files[0]
    fd = cache.pin(a)
    cache.forget(a)  # the segment is sealed while a sync job holds the file
    assert is_open(fd, a.path)
    assert len(cache) == 0
    cache.unpin(a)
    assert not is_open(fd, a.path)
    assert a.fd is None
    assert cache.try_pin(a) is None  # a job snapshotted before the seal syncs nothing
    with pytest.raises(ValueError, match="closed for good"):
        cache.pin(a)


def test_the_bound_holds_over_many_files(tmp_path: Path) -> None:
    cache = FileCache(3)
    io = FileIO()
    before = open_fds()
    made = []
    for n in range(50):
        path = tmp_path / f"g{n}"
        path.write_bytes(b"")
        handle = FileHandle(path, io)
        made.append(handle)
        use(cache, handle)
        assert len(cache) <= 3
        assert open_fds() <= before + 3
    for handle in made:
        cache.forget(handle)
    assert open_fds() == before


class EmfileOnce(FileIO):
    """Refuses the first open of a path with EMFILE, as a process out of descriptors."""

    def __init__(self, refuse: Path) -> None:
        self.refuse: Path | None = refuse

    def open(self, path: Path, *, create: bool = False, write: bool = True) -> int:
        if path == self.refuse:
            self.refuse = None
            raise OSError(errno.EMFILE, "Too many open files")
        return super().open(path, create=create, write=write)


def test_out_of_descriptors_closes_the_cache_and_retries(
    tmp_path: Path, files: list[FileHandle]
) -> None:
    cache = FileCache(8)
    for handle in files[:4]:
        use(cache, handle)
    pinned = files[4]
    fd_pinned = cache.pin(pinned)
    target = tmp_path / "target"
    target.write_bytes(b"")
    handle = FileHandle(target, EmfileOnce(target))
    fd = use(cache, handle)
    assert is_open(fd, target)
    assert all(h.fd is None for h in files[:4])  # closed to make room
    assert pinned.fd == fd_pinned
    assert is_open(fd_pinned, pinned.path)
    cache.unpin(pinned)
    cache.forget(handle)


class Owner:
    def __init__(self) -> None:
        self.mapped = True

    def drop_map(self) -> None:
        self.mapped = False


def test_map_cache_drops_the_least_recently_used() -> None:
    cache = MapCache(2)
    a, b, c = Owner(), Owner(), Owner()
    cache.add(a)
    cache.add(b)
    cache.touch(a)
    cache.add(c)
    assert a.mapped
    assert not b.mapped
    assert c.mapped
    assert b not in cache
    assert len(cache) == 2
    cache.discard(a)
    b.mapped = True  # b maps itself again
    cache.add(b)
    assert a.mapped
    assert b.mapped
    assert c.mapped


def fill(log: Log, batches: int, value_size: int = 3000) -> None:
    for n in range(batches):
        log.append(make_batch(0, 4, timestamp=1_700_000_000_000 + n, value_size=value_size))


def test_a_borrowed_slice_outlives_its_evicted_map(tmp_path: Path, small_caches: None) -> None:
    handles.configure(16, 1)
    log = Log.open(tmp_path / "t-0", CONFIG)
    fill(log, 40)  # ~480 KiB: several sealed segments
    sealed = log.segments[:-1]
    assert len(sealed) >= 3
    first = log.read(0, 1 << 20)
    assert first is not None
    expected = bytes(first.data)
    for segment in sealed[1:]:  # map every other segment: the first one's map goes
        assert log.read(segment.base_offset, 1 << 20) is not None
    assert sealed[0]._map is None
    assert bytes(first.data) == expected  # the slice kept its mapping
    again = log.read(0, 1 << 20)  # and the segment maps itself again
    assert again is not None
    assert bytes(again.data) == expected
    assert len(handles.MAPS) == 1
    del first, again
    log.close()


def test_retention_and_close_let_go_of_maps_and_files(tmp_path: Path, small_caches: None) -> None:
    handles.configure(16, 64)
    before = open_fds()
    clock = [1_700_000_000_000]
    config = LogConfig(
        segment_bytes=64 * KiB,
        index_interval_bytes=512,
        max_message_bytes=32 * KiB,
        retention_bytes=64 * KiB,
    )
    log = Log.open(tmp_path / "t-0", config, clock=lambda: clock[0])
    fill(log, 40)
    for segment in log.segments[:-1]:
        assert segment.read(segment.base_offset, 1, segment.next_offset) is not None
        segment.offset_index.position_for(0)
    doomed = log.segments[:-2]
    assert log.enforce_retention() == len(doomed)
    assert not any(s in handles.MAPS or s.offset_index in handles.MAPS for s in doomed)
    log.close()
    assert not any(s in handles.MAPS for s in log.segments)
    assert open_fds() == before


def test_tiny_segment_ms_does_not_leak_descriptors(tmp_path: Path, small_caches: None) -> None:
    handles.configure(4, 64)
    clock = [1_700_000_000_000]
    config = LogConfig(
        segment_bytes=64 * KiB, segment_ms=1, index_interval_bytes=512, max_message_bytes=32 * KiB
    )
    log = Log.open(tmp_path / "t-0", config, clock=lambda: clock[0])
    before = open_fds()
    for _ in range(300):
        clock[0] += 2  # every append rolls a segment
        fill(log, 1, value_size=10)
        assert open_fds() <= before + 1
    log.flush()
    assert len(log.segments) >= 299
    assert len(handles.MAPS) <= 64
    log.close()


def test_many_logs_share_a_few_descriptors(tmp_path: Path, small_caches: None) -> None:
    handles.configure(4, 64)
    before = open_fds()
    logs = [Log.open(tmp_path / f"t-{n}", CONFIG) for n in range(40)]
    assert open_fds() <= before + 4
    for _ in range(3):
        for log in logs:
            fill(log, 1, value_size=100)
            log.flush()
            assert open_fds() <= before + 4
    for n, log in enumerate(logs):
        found = log.read(0, 1 << 20)
        assert found is not None, n
        assert found.next_offset == 12, n
        log.close()
    reopened = [Log.open(tmp_path / f"t-{n}", CONFIG) for n in range(40)]
    assert open_fds() <= before + 4
    assert all(log.next_offset == 12 for log in reopened)
    for log in reopened:
        log.close()
    assert open_fds() == before


class Exhausted(FileIO):
    """Refuses to open a segment for writing with EMFILE while ``refusing``."""

    refusing = False

    def open(self, path: Path, *, create: bool = False, write: bool = True) -> int:
        if self.refusing and write and path.suffix == ".log":
            raise OSError(errno.EMFILE, "Too many open files")
        return super().open(path, create=create, write=write)


def test_out_of_descriptors_fails_the_append_not_the_log(
    tmp_path: Path, small_caches: None
) -> None:
    handles.configure(1, 64)
    io = Exhausted()
    log = Log.open(tmp_path / "t-0", CONFIG, io=io)
    other = Log.open(tmp_path / "t-1", CONFIG)  # takes the one cached descriptor
    io.refusing = True
    with pytest.raises(StorageError, match="out of file descriptors") as caught:
        fill(log, 1, value_size=100)
    assert caught.value.retriable
    assert log.offline is None
    assert log.next_offset == 0
    io.refusing = False
    fill(log, 1, value_size=100)
    assert log.next_offset == 4
    log.close()
    other.close()


def test_out_of_descriptors_at_a_roll_changes_nothing(tmp_path: Path, small_caches: None) -> None:
    handles.configure(4, 64)
    io = Exhausted()
    log = Log.open(tmp_path / "t-0", CONFIG, io=io)
    fill(log, 5)  # ~60 KB of the 64 KiB segment
    io.refusing = True
    handles.FILES.close_unpinned()  # the active file must be opened again too
    with pytest.raises(StorageError, match="out of file descriptors"):
        fill(log, 1)  # would roll
    assert log.offline is None
    assert len(log.segments) == 1
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == ["00000000000000000000.log"]
    io.refusing = False
    fill(log, 1)
    assert len(log.segments) == 2
    found = log.read(0, 1 << 20)
    assert found is not None
    assert found.next_offset == 20
    log.close()

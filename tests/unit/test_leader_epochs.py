"""The leader-epoch cache, alone and as a log keeps it through appends, cuts and restarts."""

from __future__ import annotations

from pathlib import Path

from storage_helpers import as_stored, make_batch

from mq.storage.config import KiB, LogConfig
from mq.storage.epochs import FILE_NAME, UNDEFINED, EpochEntry, LeaderEpochCache
from mq.storage.fileio import DEFAULT_IO, FileIO
from mq.storage.log import Log

CONFIG = LogConfig(segment_bytes=64 * KiB, max_message_bytes=32 * KiB)


def test_end_offsets_as_a_leader_answers_them(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path, DEFAULT_IO)
    assert cache.end_offset_for(0, 0) == (UNDEFINED, UNDEFINED)
    for epoch, start in [(1, 0), (3, 10), (4, 25)]:
        assert cache.assign(epoch, start)
    assert not cache.assign(4, 30)  # the current epoch goes on
    assert not cache.assign(2, 30)  # a stale one is ignored
    assert cache.end_offset_for(0, 40) == (UNDEFINED, UNDEFINED)
    assert cache.end_offset_for(1, 40) == (1, 10)
    assert cache.end_offset_for(2, 40) == (1, 10)  # never led: where the next one began
    assert cache.end_offset_for(3, 40) == (3, 25)
    assert cache.end_offset_for(4, 40) == (4, 40)  # the latest: the log end
    assert cache.end_offset_for(9, 40) == (4, 40)
    reread = LeaderEpochCache.read(tmp_path, DEFAULT_IO)
    assert reread is not None
    assert reread.entries == cache.entries


def test_truncations_from_both_ends(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path, DEFAULT_IO, [EpochEntry(1, 0), EpochEntry(3, 10)])
    cache.assign(5, 20)
    cache.truncate_from_end(15)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(3, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [EpochEntry(3, 12)]
    assert cache.assign(6, 8) is True  # a new epoch below older starts replaces them
    assert cache.entries == [EpochEntry(6, 8)]


def test_a_damaged_file_reads_as_missing(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("mq-leader-epochs 1\n3 10\n1 20\n")  # not increasing
    assert LeaderEpochCache.read(tmp_path, DEFAULT_IO) is None
    (tmp_path / FILE_NAME).write_text("garbage")
    assert LeaderEpochCache.read(tmp_path, DEFAULT_IO) is None


def test_a_log_records_epochs_and_rebuilds_them_from_its_batches(tmp_path: Path) -> None:
    log = Log.open(tmp_path, CONFIG)
    log.append(make_batch(0, 5), leader_epoch=0)
    log.append(make_batch(5, 5), leader_epoch=2)
    log.append(make_batch(10, 5), leader_epoch=2)
    log.append_replicated(as_stored(make_batch(15, 5), 15, leader_epoch=4))
    assert log.epochs.entries == [EpochEntry(0, 0), EpochEntry(2, 5), EpochEntry(4, 15)]
    assert log.end_offset_for_epoch(2) == (2, 15)
    log.truncate_to(12)  # a follower cut back to its leader: whole batches, so at 10
    assert log.epochs.entries == [EpochEntry(0, 0), EpochEntry(2, 5)]
    log.close()
    (tmp_path / FILE_NAME).unlink()
    rebuilt = Log.open(tmp_path, CONFIG)
    assert rebuilt.epochs.entries == [EpochEntry(0, 0), EpochEntry(2, 5)]
    rebuilt.advance_log_start(7)
    assert rebuilt.epochs.entries == [EpochEntry(2, 7)]
    rebuilt.close()
    assert Log.open(tmp_path, CONFIG).epochs.entries == [EpochEntry(2, 7)]


class _SyncRecorder(FileIO):
    """Real file I/O that records which files were fsynced (by name)."""

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.synced: list[str] = []

    def open(self, path: Path, *, create: bool = False, write: bool = True) -> int:
        fd = super().open(path, create=create, write=write)
        self.paths[fd] = path.name
        return fd

    def fsync(self, fd: int) -> None:
        self.synced.append(self.paths.get(fd, "?"))
        super().fsync(fd)


def test_a_new_epochs_file_is_written_at_once_and_synced_by_the_next_flush(
    tmp_path: Path,
) -> None:
    """A leader change costs no fsync where it happens (the event loop, for 1,000 new
    partitions at once: issue 18); the log's next flush (a worker thread's job) syncs
    the file, before the batches it covers are acknowledged as synced."""
    io = _SyncRecorder()
    log = Log.open(tmp_path, CONFIG, io=io)
    io.synced.clear()
    log.begin_epoch(3)
    written = LeaderEpochCache.read(tmp_path, io)
    assert written is not None
    assert written.entries == [EpochEntry(3, 0)]
    assert not [name for name in io.synced if name.startswith(FILE_NAME)]  # nor its .tmp
    log.append(make_batch(0, 3), leader_epoch=3)
    job = log.begin_flush()
    assert job is not None
    job.run()
    log.end_flush(job)
    assert FILE_NAME in io.synced
    io.synced.clear()
    log.flush()  # nothing new: the file is not synced again
    assert not [name for name in io.synced if name.startswith(FILE_NAME)]
    log.close()

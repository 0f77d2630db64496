"""A log's durability step that may leave the event loop: the blocking syncs of a flush.

:meth:`Log.begin_flush <mq.storage.log.Log.begin_flush>` (fast, on the log's
owner) snapshots what must reach the disk into a :class:`FlushJob`: the rolled
segments not synced yet, the active segment's file handle (pinned only while
the job runs, so that thousands of queued jobs hold no descriptor: see
:mod:`mq.storage.handles`) and the recovery checkpoint to write once those
are durable. :meth:`FlushJob.run` does the syncs and can run in a worker
thread while appends continue;
:meth:`Log.end_flush <mq.storage.log.Log.end_flush>` records the result (a
failed job takes the log offline).

Thread safety: the log's owner builds the job and reads its result; only
``run`` may run on another thread.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from mq.storage.checkpoint import Checkpoint, write_checkpoint
from mq.storage.epochs import LeaderEpochCache
from mq.storage.fileio import FileIO
from mq.storage.handles import FILES, FileHandle
from mq.storage.segment import Segment


@dataclass
class FlushJob:
    """Blocking syncs snapshotted by :meth:`~mq.storage.log.Log.begin_flush`; safe in a thread."""

    directory: Path
    io: FileIO
    sealed: list[Segment]
    active_file: FileHandle | None
    """The active segment's file to sync, if it has unsynced bytes."""
    active_size: int
    active_generation: int
    """Which file ``active_size`` is about (:attr:`mq.storage.chain.SegmentChain.generation`)."""
    checkpoint: Checkpoint | None
    epochs: LeaderEpochCache | None = None
    """The leader-epoch file to sync (replaced since its last sync), synced first."""
    epochs_written: int = 0
    """Its :attr:`~mq.storage.epochs.LeaderEpochCache.written` when the job was made."""
    error: OSError | None = field(default=None, init=False)
    seconds: float = field(default=0.0, init=False)
    """How long :meth:`run` took (the log's flush-time histogram)."""

    def run(self) -> None:
        started = time.perf_counter()
        try:
            if self.epochs is not None:
                self.epochs.sync(self.io)
            for segment in self.sealed:
                try:
                    segment.sync()
                except FileNotFoundError:
                    pass  # deleted by retention meanwhile: nothing left to keep
            if self.active_file is not None:
                self._sync_active(self.active_file)
            if self.checkpoint is not None:
                self.io.fsync_dir(self.directory)
                write_checkpoint(self.directory, self.io, self.checkpoint)
        except OSError as exc:
            self.error = exc
        self.seconds = time.perf_counter() - started

    def _sync_active(self, handle: FileHandle) -> None:
        fd = FILES.try_pin(handle)
        if fd is None:
            # sealed since the snapshot: the log syncs it as a rolled segment, and
            # end_flush does not count these bytes (the generation moved on)
            return
        try:
            self.io.fdatasync(fd)
        finally:
            FILES.unpin(handle)

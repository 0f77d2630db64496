"""The leader-epoch cache of one log: at which offset each leader epoch began.

Replication needs it to keep replicas' logs from diverging (Kafka's KIP-101):
a follower that comes back asks the leader where its own latest epoch ended
on the leader (:meth:`LeaderEpochCache.end_offset_for`) and truncates its log
there before fetching. Each entry is ``(epoch, start_offset)``: the first
offset written under that epoch. Epochs and start offsets only increase.

File ``leader-epoch.checkpoint`` in the partition directory, replaced
atomically whenever the entries change (a leader change, a truncation, the log
start moving past an entry: rare events). The replacement is written at once
(the page cache: safe from ``kill -9``) but synced by the log's next flush
(:class:`~mq.storage.flush.FlushJob`, in a worker thread), with the batches
of that epoch: an election of 1,000 new partitions costs no 2,000 fsyncs on
the event loop (issue 18), and an acknowledgement that promises a sync
(``flush.policy=always``) still comes after the file's (Kafka does the same
since KAFKA-15046)::

    mq-leader-epochs 1
    <epoch> <start_offset>
    ...

A missing or damaged file is rebuilt from the batches, whose headers carry
the epoch they were written under.

Thread safety: the owning :class:`~mq.storage.log.Log` is the only caller.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from mq.storage.fileio import FileIO
from mq.storage.handles import open_file

FILE_NAME = "leader-epoch.checkpoint"
_MAGIC = "mq-leader-epochs 1"
UNDEFINED = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch → start offset, increasing in both, mirrored into one small file."""

    def __init__(self, directory: Path, io: FileIO, entries: Iterable[EpochEntry] = ()) -> None:
        self._path = directory / FILE_NAME
        self._io = io
        self.entries: list[EpochEntry] = list(entries)
        self.written = 0
        """How many times the file was replaced (counts, to match syncs to writes)."""
        self.synced = 0
        """:attr:`written` as of the last sync of the file (see :meth:`sync`)."""

    @classmethod
    def read(cls, directory: Path, io: FileIO) -> LeaderEpochCache | None:
        """The cache in ``directory``, or None when the file is missing or damaged."""
        try:
            lines = (directory / FILE_NAME).read_text().split("\n")
        except (OSError, UnicodeDecodeError):
            return None
        if not lines or lines[0] != _MAGIC:
            return None
        entries = []
        for line in lines[1:]:
            if not line:
                continue
            fields = line.split()
            if len(fields) != 2 or not all(f.isdigit() for f in fields):
                return None
            entries.append(EpochEntry(int(fields[0]), int(fields[1])))
        cache = cls(directory, io, entries)
        return cache if cache._increasing() else None

    def _increasing(self) -> bool:
        pairs = zip(self.entries, self.entries[1:], strict=False)
        return all(a.epoch < b.epoch and a.start_offset <= b.start_offset for a, b in pairs)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (when it is new); whether it was.

        An epoch not newer than the latest is ignored (batches of the current
        epoch keep arriving). Entries starting at or after ``start_offset``
        are dropped first: a log never has a later epoch below an earlier one.
        """
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        while self.entries and self.entries[-1].start_offset > start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        self._persist()
        return True

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """(epoch, end offset) a leader answers a follower asking about ``epoch``.

        The end offset is where the first epoch after ``epoch`` starts (the
        log end for the latest epoch); the epoch returned is the largest one
        here that is not after ``epoch``. (UNDEFINED, UNDEFINED) when ``epoch``
        is older than every entry.
        """
        if not self.entries or epoch < self.entries[0].epoch:
            return UNDEFINED, UNDEFINED
        if epoch >= self.latest_epoch:
            return self.latest_epoch, log_end
        i = bisect_right([e.epoch for e in self.entries], epoch)
        return self.entries[i - 1].epoch, self.entries[i].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut at ``end_offset``: epochs starting there or later go."""
        kept = [e for e in self.entries if e.start_offset < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch holding it starts there."""
        older = [e for e in self.entries if e.start_offset <= start_offset]
        if len(older) <= 1 and (not older or older[0].start_offset == start_offset):
            return
        kept = [older[-1]._replace(start_offset=start_offset)] if older else []
        self.entries = kept + [e for e in self.entries if e.start_offset > start_offset]
        self._persist()

    @property
    def unsynced(self) -> bool:
        """Whether the file was replaced since it was last synced."""
        return self.written > self.synced

    def sync(self, io: FileIO) -> None:
        """Make the file's last replacement durable (its data, then its directory
        entry). Blocking: a flush job runs it in a worker thread."""
        fd = open_file(io, self._path, write=False)  # out of descriptors: the cache gives one
        try:
            io.fsync(fd)
        finally:
            io.close(fd)
        io.fsync_dir(self._path.parent)

    def _persist(self) -> None:
        lines = [_MAGIC, *(f"{e.epoch} {e.start_offset}" for e in self.entries)]
        self._io.write_file_atomic(self._path, ("\n".join(lines) + "\n").encode(), durable=False)
        self.written += 1

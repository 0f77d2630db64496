"""Producer ids for idempotent producers: unique for the life of the data directory.

Ids are handed out from blocks; the start of the next block is written to
``<data>/producer-ids`` (atomically, synced) *before* any id of the current
block is used, so a crash can skip ids but never repeat one.
"""

from __future__ import annotations

from pathlib import Path

from mq.storage.fileio import DEFAULT_IO, FileIO

FILE_NAME = "producer-ids"
BLOCK_SIZE = 1000
"""Ids reserved per write of the file: one sync per thousand producers."""
MAX_EPOCH = 32_767
"""producerEpoch is an int16 in the batch header."""


class ProducerIdAllocator:
    def __init__(self, data_dir: Path, io: FileIO = DEFAULT_IO) -> None:
        self._path = data_dir / FILE_NAME
        self._io = io
        self._next = 0
        self._block_end = 0

    def allocate(self) -> int:
        if self._next >= self._block_end:
            start = max(self._read(), self._block_end)
            self._io.write_file_atomic(self._path, f"{start + BLOCK_SIZE}\n".encode())
            self._next, self._block_end = start, start + BLOCK_SIZE
        pid = self._next
        self._next += 1
        return pid

    def _read(self) -> int:
        try:
            return int(self._path.read_text().strip() or 0)
        except FileNotFoundError:
            return 0

    def bump(self, producer_id: int, epoch: int) -> tuple[int, int]:
        """The next epoch of an existing id (a new id once the epoch would overflow)."""
        if producer_id < 0 or epoch + 1 > MAX_EPOCH:
            return self.allocate(), 0
        return producer_id, max(epoch, -1) + 1

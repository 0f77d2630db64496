"""The recovery checkpoint of one partition log: where recovery must start.

File ``recovery.checkpoint`` in the partition directory, replaced atomically::

    mq-log-checkpoint 1
    <recover_from> <clean> <log_start_offset>

``recover_from`` is the base offset of the oldest segment whose data may not be
on disk yet: every segment before it was synced (and trimmed) before the file
was written, so recovery trusts them and re-checks every batch from this
segment on. ``clean`` is 1 only after a clean close, when nothing needs a
re-check; the log writes 0 as soon as it opens. ``log_start_offset`` is the
first offset readers may see (it can sit inside the first segment after a
delete-records request).

A missing or unreadable file is not an error: recovery then re-checks every
segment, which is slower but loses nothing.

The **high-watermark checkpoint** (Kafka's replication-offset-checkpoint, one file
per partition here), ``high-watermark.checkpoint``::

    mq-hw-checkpoint 1
    <high watermark>

is written by the broker every few seconds and at a clean close, so that a restarted
replica does not start at its log start (serving nothing until its followers' first
fetches). It lags: a missing, damaged or stale file only means a lower starting high
watermark, never a wrong one (the caller caps it at the log end).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from mq.storage.fileio import FileIO

FILE_NAME = "recovery.checkpoint"
_MAGIC = "mq-log-checkpoint 1"
HW_FILE_NAME = "high-watermark.checkpoint"
_HW_MAGIC = "mq-hw-checkpoint 1"


class Checkpoint(NamedTuple):
    recover_from: int
    clean: bool
    log_start_offset: int

    def encode(self) -> bytes:
        line = f"{self.recover_from} {int(self.clean)} {self.log_start_offset}"
        return f"{_MAGIC}\n{line}\n".encode()


def read_checkpoint(directory: Path, io: FileIO) -> Checkpoint | None:
    """The checkpoint in ``directory``, or None when it is missing or damaged."""
    path = directory / FILE_NAME
    try:
        fd = io.open(path, write=False)
    except FileNotFoundError:
        return None
    try:
        raw = io.pread(fd, 4096, 0)
    finally:
        io.close(fd)
    lines = raw.decode("ascii", "replace").split("\n")
    if len(lines) < 2 or lines[0] != _MAGIC:
        return None
    fields = lines[1].split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields) or fields[1] not in ("0", "1"):
        return None
    return Checkpoint(int(fields[0]), fields[1] == "1", int(fields[2]))


def write_checkpoint(directory: Path, io: FileIO, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint durably (blocking: write, fsync, rename, fsync the directory)."""
    io.write_file_atomic(directory / FILE_NAME, checkpoint.encode())


def read_high_watermark(directory: Path) -> int | None:
    """The checkpointed high watermark in ``directory``, or None (missing or damaged)."""
    try:
        lines = (directory / HW_FILE_NAME).read_bytes()[:4096].decode("ascii", "replace")
    except OSError:
        return None
    parts = lines.split("\n")
    if len(parts) < 2 or parts[0] != _HW_MAGIC or not parts[1].isdigit():
        return None
    return int(parts[1])


def write_high_watermark(directory: Path, io: FileIO, high_watermark: int) -> None:
    """Replace the high-watermark checkpoint (blocking; not synced: a stale or lost file
    only lowers the next start's high watermark)."""
    data = f"{_HW_MAGIC}\n{high_watermark}\n".encode()
    io.write_file_atomic(directory / HW_FILE_NAME, data, durable=False)

"""What retention and compaction need of a log, without importing the log.

:class:`SegmentChain` is a log's ordered segments with the bookkeeping that must
change with them (what is not yet synced, the recovery checkpoint, the
compaction state). :class:`LogCore` is the small interface of a log that
:mod:`mq.storage.retention` and :mod:`mq.storage.compaction` work through: the
chain, the log start offset, the producer table, the leader epochs, and four
steps that keep them consistent (``check_online``, ``fail``, ``roll``,
``trim_epochs``). :class:`~mq.storage.log.Log` satisfies it and calls those
modules; they import this module, never ``log.py``, so no import circle is
left among ``mq/storage`` (``tests/unit/test_storage_imports.py``).

Thread safety: none; the log's owner is the only one to touch a chain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mq.errors import StorageError
from mq.records.encryption import Keyring
from mq.storage.checkpoint import Checkpoint
from mq.storage.cleaner import CleanerState
from mq.storage.config import LogConfig
from mq.storage.epochs import LeaderEpochCache
from mq.storage.fileio import FileIO
from mq.storage.producers import ProducerStates
from mq.storage.segment import Segment


@dataclass(slots=True)
class SegmentChain:
    """A log's segments, oldest first (the last one is active), and their bookkeeping."""

    segments: list[Segment]
    bases: list[int]
    """Each segment's base offset, for bisecting (kept equal to ``segments``)."""
    checkpointed: Checkpoint
    """The recovery checkpoint last written."""
    unsynced: list[Segment] = field(default_factory=list)
    """Closed segments not yet synced to disk (the next flush syncs them)."""
    active_synced: int = 0
    """Bytes of the active segment known synced."""
    generation: int = 0
    """Bumped whenever the active file is replaced or rewritten (roll, truncation),
    so that a sync job snapshotted before cannot vouch for the new bytes."""
    cleaner: CleanerState = field(default_factory=CleanerState)
    """How far compaction got (``cleaner-offset-checkpoint``)."""

    @classmethod
    def of(cls, segments: list[Segment], checkpointed: Checkpoint) -> SegmentChain:
        return cls(
            segments,
            [s.base_offset for s in segments],
            checkpointed,
            active_synced=segments[-1].size,
        )


class LogCore(Protocol):
    """The part of a log that retention and compaction use (``Log`` satisfies it)."""

    directory: Path
    config: LogConfig
    log_start_offset: int
    producers: ProducerStates
    epochs: LeaderEpochCache
    chain: SegmentChain
    io: FileIO
    clock: Callable[[], int]
    keyring: Keyring | None
    name: bytes

    @property
    def size_bytes(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    def check_online(self) -> None:
        """Raise the error that took the log offline, if any."""

    def fail(self, operation: str, exc: OSError) -> StorageError:
        """Take the log offline for good (a failed write is sticky); the error to raise."""

    def roll(self, base_offset: int) -> Segment:
        """Seal the active segment and start a new one at ``base_offset`` (raises OSError)."""

    def trim_epochs(self) -> None:
        """Drop leader epochs below the log start offset."""

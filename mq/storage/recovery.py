"""Opening a log's segments: trust what the checkpoint covers, re-check the rest.

Segments before the checkpoint's ``recover_from`` are opened as trusted (only
their indexes are checked, and rebuilt when wrong); every batch from there on
is re-checked (length, magic, CRC, offsets). The log is cut at the first bad
or partial batch: later segments are deleted, with a warning saying how many
bytes were dropped and why.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from mq.errors import CorruptRecordError
from mq.storage.checkpoint import Checkpoint
from mq.storage.config import LogConfig
from mq.storage.fileio import FileIO
from mq.storage.segment import Segment

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_DERIVED_FILE = re.compile(r"^(\d{20})\.(index|timeindex)$")


def open_segments(
    directory: Path, config: LogConfig, io: FileIO, checkpoint: Checkpoint | None
) -> list[Segment]:
    """Open every segment in ``directory``, recovering those after the checkpoint."""
    bases = []
    for path in directory.iterdir():
        if m := _SEGMENT_FILE.match(path.name):
            bases.append(int(m.group(1)))
        elif path.name.endswith(".tmp"):
            io.unlink(path)
    bases.sort()
    stems = {f"{b:020d}" for b in bases}
    for path in directory.iterdir():
        if (m := _DERIVED_FILE.match(path.name)) and m.group(1) not in stems:
            io.unlink(path)  # an index without its log is left from a deletion
    clean = checkpoint is not None and checkpoint.clean
    recover_from = checkpoint.recover_from if checkpoint else -1
    interval = config.index_interval_bytes
    segments: list[Segment] = []
    expected: int | None = None
    for n, base in enumerate(bases):
        if expected is not None and base < expected:
            _drop(directory, io, bases[n:], f"segment {base} overlaps offsets before {expected}")
            break
        segment: Segment | None = None
        if clean or base < recover_from:
            try:
                segment = Segment.open_trusted(directory, base, io, interval)
            except CorruptRecordError as exc:
                log.warning(
                    "%s: segment %d fails its header walk (%s); recovering it",
                    directory.name,
                    base,
                    exc,
                )
        if segment is None:
            segment, dropped, why, cut = Segment.recover(directory, base, io, interval, base)
            if dropped:
                log.warning(
                    "%s: recovery dropped %d bytes of segment %d at byte %d (%s)",
                    directory.name,
                    dropped,
                    base,
                    segment.size,
                    why or "partial batch",
                )
            if cut and not dropped and why is None and n + 1 < len(bases):
                # a sealed segment was trimmed to its data: zeros at its end mean the
                # data never reached the disk (a power cut), and later offsets would
                # follow a hole
                log.warning(
                    "%s: segment %d ends in %d zero bytes after byte %d",
                    directory.name,
                    base,
                    cut,
                    segment.size,
                )
                why = "zeros where data should be"
            if why is not None or dropped:
                segments.append(segment)
                _drop(directory, io, bases[n + 1 :], "they follow a damaged batch")
                break
        segments.append(segment)
        expected = segment.next_offset
    return segments


def _drop(directory: Path, io: FileIO, bases: list[int], why: str) -> None:
    for base in bases:
        log.warning("%s: deleting segment %d: %s", directory.name, base, why)
        for suffix in (".log", ".index", ".timeindex"):
            try:
                io.unlink(directory / f"{base:020d}{suffix}")
            except FileNotFoundError:
                pass

"""Test batches from an independent encoder, and checks of what a log gives back.

Batches are built with kafka-python's ``DefaultRecordBatchBuilder`` (not mq's own
encoder), so the storage tests do not trust the code they test. Every record's
value names the offset it is meant to land at (``b"o=<offset>;"`` padded), so a
test that reads a batch back can check order and content from the bytes alone.
"""

from __future__ import annotations

import os
import struct
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mq.storage.checkpoint import FILE_NAME as CHECKPOINT_FILE
from mq.storage.fileio import FileIO

with warnings.catch_warnings():
    # kafka-python's package import reads its schemas with a deprecated importlib call
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

_OFFSET = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_EPOCH = struct.Struct(">i")
LOG_OVERHEAD = 12


def make_batch(
    first_offset: int,
    count: int,
    *,
    timestamp: int = 1_000,
    value_size: int = 16,
    key: bytes | None = b"k",
    step: int = 1,
) -> bytes:
    """A batch of ``count`` records meant for offsets ``first_offset``...; baseOffset is 0.

    Record ``i`` has timestamp ``timestamp + i * step`` and a value that starts with
    ``o=<first_offset + i>;`` and is padded with ``.`` to ``value_size`` bytes.
    """
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(
            i,
            timestamp=timestamp + i * step,
            key=key,
            value=record_value(first_offset + i, value_size),
            headers=[],
        )
    return bytes(builder.build())


def record_value(offset: int, value_size: int = 16) -> bytes:
    value = b"o=%d;" % offset
    return value + b"." * max(0, value_size - len(value))


def as_stored(batch: bytes, base_offset: int, leader_epoch: int = 0) -> bytes:
    """The bytes a leader keeps: ``batch`` with baseOffset and partitionLeaderEpoch rewritten."""
    out = bytearray(batch)
    _OFFSET.pack_into(out, 0, base_offset)
    _EPOCH.pack_into(out, 12, leader_epoch)
    return bytes(out)


def split_batches(data: bytes | memoryview) -> list[bytes]:
    """Cut back-to-back batches apart by their length fields (no other check)."""
    raw = bytes(data)
    out = []
    pos = 0
    while pos < len(raw):
        size = _LENGTH.unpack_from(raw, pos + 8)[0] + LOG_OVERHEAD
        assert size >= 61, f"bad batch length at byte {pos}"
        assert pos + size <= len(raw), f"batch at byte {pos} runs past the end"
        out.append(raw[pos : pos + size])
        pos += size
    return out


def base_offset_of(batch: bytes) -> int:
    return int(_OFFSET.unpack_from(batch, 0)[0])


@dataclass(frozen=True)
class Rec:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def decode(batch: bytes) -> list[Rec]:
    """Records of one batch, decoded by kafka-python after checking its CRC."""
    parsed = DefaultRecordBatch(batch)
    assert parsed.validate_crc(), "CRC mismatch"
    return [Rec(r.offset, r.timestamp, r.key, r.value) for r in parsed]


def check_self_describing(batch: bytes) -> None:
    """Every record's value names the offset it sits at."""
    for rec in decode(batch):
        assert rec.value is not None
        assert rec.value.startswith(b"o=%d;" % rec.offset), (rec.offset, rec.value[:24])


def segment_files(directory: Path, suffix: str = ".log") -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(suffix))


@dataclass
class TrackingIO(FileIO):
    """A :class:`FileIO` that knows which files hold writes not yet synced.

    A file is *dirty* after a ``pwrite`` or a shrinking ``truncate`` through
    this seam, or when a test says so with :meth:`touch` (writes through a map
    do not pass the seam); an ``fsync``/``fdatasync`` of any descriptor of it
    makes it clean. ``on_checkpoint`` runs before each checkpoint is written.
    """

    paths: dict[int, Path] = field(default_factory=dict)
    dirty: set[Path] = field(default_factory=set)
    syncs: list[Path] = field(default_factory=list)
    checkpoints: list[bytes] = field(default_factory=list)

    def open(self, path: Path, *, create: bool = False, write: bool = True) -> int:
        fd = super().open(path, create=create, write=write)
        self.paths[fd] = Path(path)
        return fd

    def dup(self, fd: int) -> int:
        new = super().dup(fd)
        self.paths[new] = self.paths[fd]
        return new

    def close(self, fd: int) -> None:
        self.paths.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        super().pwrite(fd, data, offset)
        self.dirty.add(self.paths[fd])

    def truncate(self, fd: int, length: int) -> None:
        shrinks = length < os.fstat(fd).st_size
        super().truncate(fd, length)
        if shrinks:
            self.dirty.add(self.paths[fd])

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        self._synced(fd)

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self._synced(fd)

    def _synced(self, fd: int) -> None:
        path = self.paths[fd]
        self.dirty.discard(path)
        self.syncs.append(path)

    def unlink(self, path: Path) -> None:
        super().unlink(path)
        self.dirty.discard(Path(path))

    def touch(self, path: Path) -> None:
        self.dirty.add(Path(path))

    def write_file_atomic(self, path: Path, data: bytes, *, durable: bool = True) -> None:
        if Path(path).name == CHECKPOINT_FILE:  # not producer-state snapshots
            self.checkpoints.append(data)
            self.on_checkpoint(Path(path), data)
        super().write_file_atomic(path, data, durable=durable)
        self.dirty.discard(Path(path).with_name(Path(path).name + ".tmp"))

    def on_checkpoint(self, path: Path, data: bytes) -> None:
        """Hook for tests; runs before the checkpoint is replaced."""


def iter_records(batches: list[bytes]) -> Iterator[Rec]:
    for batch in batches:
        yield from decode(batch)

"""Log compaction: keep the newest record of every key in a log's closed segments.

A log with ``cleanup.policy=compact`` is cleaned in passes, as Kafka's log
cleaner does, split like a flush so that the work never blocks the event loop:

1. :meth:`Log.begin_clean <mq.storage.log.Log.begin_clean>` (the log's owner,
   fast) picks the *cleanable range*: the closed segments from the first on
   that the recovery checkpoint covers (synced) and whose newest record is
   older than ``min.compaction.lag.ms``. A pass is due when the bytes not
   cleaned yet are at least ``min.cleanable.dirty.ratio`` of the range, or
   when a tombstone's delete horizon has passed.
2. :meth:`CleanJob.run` (a worker thread) maps those segments itself, builds
   key → newest offset over the range, and writes the cleaned segments into
   ``<log>/.cleaned/``. A batch that loses nothing is copied as it is; one
   that loses records is rebuilt with those it keeps, with the same
   baseOffset, lastOffsetDelta and producer fields (offsets and idempotent
   sequences do not move); a batch left empty goes. Consecutive segments are
   merged while they fit in ``segment.bytes``.
3. :meth:`Log.end_clean <mq.storage.log.Log.end_clean>` (the owner) swaps the
   cleaned segments in, unless the log changed under the job meanwhile
   (retention, truncation), in which case the job's output is dropped.

Tombstones (null values) stay readable for ``delete.retention.ms`` after the
pass that first keeps them: that pass stamps the batch with a *delete horizon*
(attribute bit 0x40, the horizon in baseTimestamp, as Kafka's KIP-534); a pass
after the horizon drops them. Records without a key cannot be compacted: the
log refuses them on append, and the cleaner drops any it finds.

Encrypted at rest (:mod:`mq.records.encryption`): a pass opens each batch with the
log's keyring to read its keys, and seals every batch it writes with the newest
key; a batch kept whole is copied as it is only if that key sealed it already,
so a pass also moves a compacted log off older keys (and encrypts batches stored
before encryption was on). Without the key of a batch in the range the pass
fails, naming the key id, and the log stays as it was.

The swap survives a crash at any point: the cleaned files are synced, then
the manifest ``cleaner.swap`` (for each new segment, the old ones it
replaces) is written atomically — the commit point —, the old files are
unlinked and the new ones renamed into place, and the manifest goes.
:func:`finish_swap`, run when a log opens, completes a committed swap and
throws away an uncommitted one.

The range always starts at the log's first segment, so every older version of
a key is in the map's reach. Each pass reads the whole range (Kafka builds its
map over the dirty part only): fine for offset topics and keyed tables of
moderate size; ``max_keys`` bounds the map's memory by ending the range early.

Thread safety: a :class:`CleanJob` is built and swapped in by the log's owner
and run by one worker thread; it reads files through maps of its own.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mq.errors import CorruptRecordError, MQError
from mq.records.batch import (
    DELETE_HORIZON_BIT,
    ENCRYPTED_BIT,
    BatchHeader,
    iter_batches,
    parse_header,
)
from mq.records.encryption import Keyring, open_batch, seal_batch, stored_key_id
from mq.records.records import decode_records, rebuild_batch
from mq.storage.fileio import FileIO
from mq.storage.segment import MAX_RELATIVE_OFFSET, Segment, segment_name

log = logging.getLogger(__name__)

CLEANED_DIR = ".cleaned"
MANIFEST = "cleaner.swap"
STATE_FILE = "cleaner.checkpoint"
_STATE_MAGIC = "mq-cleaner 1"
_SUFFIXES = (".log", ".index", ".timeindex")
WRITE_CHUNK = 1 << 20
DEFAULT_MAX_KEYS = 4_000_000
"""Keys one pass may hold in memory (about 0.5 GiB for short keys)."""


@dataclass(frozen=True)
class CleanerState:
    """What the last pass left: where the cleaned part ends, when a tombstone expires."""

    clean_end: int = 0
    """Offset after the last pass's range: segments wholly below it are clean."""
    next_horizon: int | None = None
    """The earliest delete horizon of a tombstone kept so far (None: no tombstone)."""


@dataclass(frozen=True)
class Source:
    """A closed segment the job reads (its facts snapshotted on the owner's thread)."""

    base: int
    next_offset: int
    size: int
    path: Path


@dataclass(frozen=True)
class Output:
    """One cleaned segment, replacing consecutive sources; ``base`` None: nothing kept."""

    base: int | None
    replaces: tuple[int, ...]


@dataclass
class CleanJob:
    """One compaction pass over a log's cleanable range; :meth:`run` in a worker thread."""

    directory: Path
    io: FileIO
    segments: list[Segment]
    """The log's segments the range starts with (the swap checks they are still there)."""
    sources: list[Source]
    index_interval: int
    segment_bytes: int
    delete_retention_ms: int
    now_ms: int
    max_keys: int = DEFAULT_MAX_KEYS
    keyring: Keyring | None = None
    """Encryption at rest: batches are opened to be compacted, and every batch the
    pass writes is sealed with the newest key (see :meth:`_clean_batch`)."""
    name: bytes = b""
    """The partition's name (bound to its encrypted batches)."""
    outputs: list[Output] = field(default_factory=list)
    state: CleanerState = field(default_factory=CleanerState)
    """The state to keep once this pass is swapped in."""
    error: Exception | None = None
    bytes_read: int = 0
    bytes_written: int = 0
    records_dropped: int = 0
    _cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        """Make :meth:`run` stop early (the log is closing); its output is dropped."""
        self._cancelled.set()

    def run(self) -> None:
        """Clean the range into ``.cleaned/``; a failure lands in :attr:`error`."""
        maps: list[memoryview | None] = []
        try:
            prepare_cleaned_dir(self.directory, self.io)
            maps = [self._map(source) for source in self.sources]
            latest = self._newest_offsets(maps)
            self._write_outputs(maps, latest)
        except (OSError, MQError, _Cancelled) as exc:
            self.error = exc
            self.outputs = []
        finally:
            maps.clear()  # unmapped when the last view goes (a traceback may hold one)

    # -- pass one: the newest offset of every key --------------------------------

    def _map(self, source: Source) -> memoryview | None:
        """A map of the source that holds no descriptor (:mod:`mq.storage.mapping`): a
        pass over hundreds of segments needs none of the broker's few."""
        fd = self.io.open(source.path, write=False)
        try:
            return self.io.map_view(fd, source.size, write=False) if source.size else None
        finally:
            self.io.close(fd)

    def _newest_offsets(self, maps: list[memoryview | None]) -> dict[bytes, int]:
        latest: dict[bytes, int] = {}
        for n, buf in enumerate(maps):
            if n and len(latest) >= self.max_keys:
                log.info(
                    "%s: %d keys fill the cleaner's map; this pass ends at offset %d",
                    self.directory.name,
                    len(latest),
                    self.sources[n].base,
                )
                del self.sources[n:]  # the maps past the range are closed by run()
                break
            for pos, header in _batches(buf):
                self._check_cancelled()
                if header.is_control:
                    continue
                assert buf is not None
                for record in decode_records(self._plain(buf, pos, header)):
                    if record.key is not None:
                        latest[record.key] = record.offset
        return latest

    # -- pass two: the cleaned segments -------------------------------------------

    def _write_outputs(self, maps: list[memoryview | None], latest: dict[bytes, int]) -> None:
        horizon: int | None = None
        cleaned = self.directory / CLEANED_DIR
        for group in self._groups():
            base = self.sources[group[0]].base
            spool = _Spool(self.io, cleaned / segment_name(base, ".log"))
            changed = len(group) > 1  # merging segments is a change too
            try:
                for n in group:
                    self.bytes_read += self.sources[n].size
                    buf = maps[n]
                    for pos, header in _batches(buf):
                        self._check_cancelled()
                        assert buf is not None
                        whole, rebuilt, due = self._clean_batch(buf, pos, header, latest)
                        if due is not None:
                            horizon = due if horizon is None else min(horizon, due)
                        if whole:
                            spool.add_range(buf, pos, pos + header.size)
                        else:
                            changed = True
                            if rebuilt is not None:
                                spool.add(rebuilt)
                        if changed:
                            spool.spill()
                if not changed:
                    continue  # a single segment that loses nothing stays as it is
                # the first segment stays, even empty, so that the log start does not move
                spool.finish(create=group[0] == 0)
            finally:
                spool.close()
            replaces = tuple(self.sources[n].base for n in group)
            if spool.created:
                # index files built (and synced) next to the cleaned log
                Segment.open_trusted(cleaned, base, self.io, self.index_interval).close()
                self.outputs.append(Output(base, replaces))
            else:
                self.outputs.append(Output(None, replaces))
            self.bytes_written += spool.written
        self.io.fsync_dir(cleaned)
        self.state = CleanerState(self.sources[-1].next_offset if self.sources else 0, horizon)

    def _groups(self) -> list[list[int]]:
        """Indexes of consecutive sources merged into one cleaned segment each."""
        groups: list[list[int]] = []
        size = 0
        for n, source in enumerate(self.sources):
            if groups:
                first = self.sources[groups[-1][0]].base
                fits = size + source.size <= self.segment_bytes
                if fits and source.next_offset - 1 - first <= MAX_RELATIVE_OFFSET:
                    groups[-1].append(n)
                    size += source.size
                    continue
            groups.append([n])
            size = source.size
        return groups

    def _clean_batch(
        self, buf: memoryview, pos: int, header: BatchHeader, latest: dict[bytes, int]
    ) -> tuple[bool, bytes | None, int | None]:
        """Whether the batch stays whole; else its rebuilt bytes (None: it goes). And its
        delete horizon if it keeps a tombstone."""
        if header.is_control:
            return True, None, None
        plain = self._plain(buf, pos, header)
        if header.attributes & ENCRYPTED_BIT:
            header = parse_header(plain)
        records = decode_records(plain)
        stamped = bool(header.attributes & DELETE_HORIZON_BIT)
        horizon = header.base_timestamp if stamped else self.now_ms + self.delete_retention_ms
        kept = []
        tombstones = False
        for record in records:
            key = record.key
            if key is None or latest.get(key) != record.offset:
                continue
            if record.value is None:
                if stamped and self.now_ms >= horizon:
                    continue  # past its horizon: the delete is complete
                tombstones = True
            kept.append(record)
        self.records_dropped += len(records) - len(kept)
        due = horizon if tombstones else None
        if not kept:
            return False, None, None
        if len(kept) == len(records) and (stamped or not tombstones):
            if self._sealed_with_newest(buf, pos):
                return True, None, due
            return False, self._seal(bytes(plain), header), due  # under an older key, or plain
        if tombstones and not stamped:
            attributes, base_timestamp = header.attributes | DELETE_HORIZON_BIT, horizon
        elif tombstones:
            attributes, base_timestamp = header.attributes, header.base_timestamp
        else:  # no tombstone left: an ordinary batch again
            attributes = header.attributes & ~DELETE_HORIZON_BIT
            base_timestamp = kept[0].timestamp
        rebuilt = rebuild_batch(header, kept, attributes=attributes, base_timestamp=base_timestamp)
        return False, self._seal(rebuilt, header), due

    def _plain(self, buf: memoryview, pos: int, header: BatchHeader) -> memoryview | bytearray:
        """The batch at ``pos``, opened if it is encrypted."""
        if header.attributes & ENCRYPTED_BIT:
            return open_batch(self.keyring, self.name, buf, pos, header)
        return memoryview(buf)[pos : pos + header.size]

    def _sealed_with_newest(self, buf: memoryview, pos: int) -> bool:
        """Whether a batch may be copied as it is: no keyring, or sealed with its newest key
        (so a pass moves a compacted log's old batches to the newest key)."""
        return self.keyring is None or stored_key_id(buf, pos) == self.keyring.newest

    def _seal(self, batch: bytes, header: BatchHeader) -> bytes:
        if self.keyring is None:
            return batch
        sealed, _ = seal_batch(
            self.keyring, self.name, batch, 0, parse_header(batch), header.base_offset
        )
        return bytes(sealed)  # the spool takes bytes

    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise _Cancelled("the log is closing")


class _Cancelled(Exception):
    pass


class _Spool:
    """The bytes of one cleaned segment: ranges of source maps and rebuilt batches.

    Nothing is written until :meth:`spill` (the caller knows by then that the
    segment changes), and then in chunks of at most :data:`WRITE_CHUNK`.
    """

    def __init__(self, io: FileIO, path: Path) -> None:
        self._io = io
        self._path = path
        self._fd: int | None = None
        self._pending: list[tuple[memoryview, int, int] | bytes] = []
        self._pending_bytes = 0
        self.written = 0

    def add_range(self, buf: memoryview, start: int, end: int) -> None:
        last = self._pending[-1] if self._pending else None
        if isinstance(last, tuple) and last[0] is buf and last[2] == start:
            self._pending[-1] = (buf, last[1], end)  # contiguous batches: one range
        else:
            self._pending.append((buf, start, end))
        self._pending_bytes += end - start

    def add(self, data: bytes) -> None:
        self._pending.append(data)
        self._pending_bytes += len(data)

    def spill(self) -> None:
        if self._pending_bytes >= WRITE_CHUNK:
            self._write_pending()

    @property
    def created(self) -> bool:
        return self._fd is not None

    def finish(self, *, create: bool) -> None:
        """Write what is left and sync the file (nothing written: no file unless ``create``)."""
        if create:
            self._open()
        self._write_pending()
        if self._fd is not None:
            self._io.fsync(self._fd)

    def _open(self) -> None:
        if self._fd is None:
            self._fd = self._io.open(self._path, create=True)
            self._io.truncate(self._fd, 0)

    def _write_pending(self) -> None:
        for piece in self._pending:
            self._open()
            assert self._fd is not None
            if isinstance(piece, bytes):
                self._io.pwrite(self._fd, piece, self.written)
                self.written += len(piece)
                continue
            buf, start, end = piece
            for lo in range(start, end, WRITE_CHUNK):
                chunk = buf[lo : min(end, lo + WRITE_CHUNK)]
                self._io.pwrite(self._fd, chunk, self.written)
                self.written += len(chunk)
        self._pending.clear()
        self._pending_bytes = 0

    def close(self) -> None:
        self._pending.clear()
        if self._fd is not None:
            self._io.close(self._fd)


def _batches(buf: memoryview | None) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of every batch in a segment's map, each checked."""
    if buf is None:
        return
    pos = 0
    for header in iter_batches(buf):
        yield pos, header
        pos += header.size


# -- files ----------------------------------------------------------------------------


def prepare_cleaned_dir(directory: Path, io: FileIO) -> None:
    """An empty ``.cleaned/`` directory (what an unfinished pass left is thrown away)."""
    cleaned = directory / CLEANED_DIR
    if cleaned.is_dir():
        for path in cleaned.iterdir():
            io.unlink(path)
    else:
        cleaned.mkdir()
    # a manifest unlinked by an earlier pass must not come back over this pass's files
    io.fsync_dir(directory)


def commit_swap(directory: Path, io: FileIO, outputs: list[Output]) -> None:
    """Write the manifest (the commit point), move the cleaned files in, drop the manifest."""
    body = {"version": 1, "swaps": [{"base": o.base, "replaces": o.replaces} for o in outputs]}
    io.write_file_atomic(directory / MANIFEST, json.dumps(body).encode())
    _apply(directory, io, outputs)


def finish_swap(directory: Path, io: FileIO) -> None:
    """At open: complete a committed swap, discard an uncommitted pass's files."""
    manifest = directory / MANIFEST
    try:
        raw = manifest.read_bytes()
    except FileNotFoundError:
        raw = None
    if raw is not None:
        try:
            body = json.loads(raw)
            outputs = [Output(s["base"], tuple(s["replaces"])) for s in body["swaps"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRecordError(f"{manifest} is damaged: {exc}") from exc
        log.warning("%s: completing a compaction swap cut short", directory.name)
        _apply(directory, io, outputs)
    cleaned = directory / CLEANED_DIR
    if cleaned.is_dir():
        for path in cleaned.iterdir():
            io.unlink(path)


def _apply(directory: Path, io: FileIO, outputs: list[Output]) -> None:
    """Replace old segment files by cleaned ones; safe to repeat after a crash."""
    cleaned = directory / CLEANED_DIR
    for output in outputs:
        for base in output.replaces:
            if base != output.base:
                _unlink(io, *(directory / segment_name(base, s) for s in _SUFFIXES))
        if output.base is None:
            continue
        source = cleaned / segment_name(output.base, ".log")
        if not source.exists():
            continue  # moved in before the crash
        _unlink(io, *(directory / segment_name(output.base, s) for s in _SUFFIXES[1:]))
        for suffix in (".index", ".timeindex", ".log"):  # the log last: it marks this done
            name = segment_name(output.base, suffix)
            if (cleaned / name).exists():
                io.rename(cleaned / name, directory / name)
    io.fsync_dir(directory)
    _unlink(io, directory / MANIFEST)
    io.fsync_dir(directory)


def _unlink(io: FileIO, *paths: Path) -> None:
    for path in paths:
        try:
            io.unlink(path)
        except FileNotFoundError:
            pass


def read_state(directory: Path) -> CleanerState:
    """The last pass's state; a missing or damaged file means nothing is clean yet."""
    try:
        lines = (directory / STATE_FILE).read_text().split("\n")
    except (OSError, UnicodeDecodeError):
        return CleanerState()
    fields = lines[1].split() if len(lines) > 1 and lines[0] == _STATE_MAGIC else []
    if len(fields) != 2 or not all(f.lstrip("-").isdigit() for f in fields):
        return CleanerState()
    horizon = int(fields[1])
    return CleanerState(int(fields[0]), None if horizon < 0 else horizon)


def write_state(directory: Path, io: FileIO, state: CleanerState) -> None:
    """Keep the state for the next start (a hint: losing it only means a longer pass)."""
    horizon = -1 if state.next_horizon is None else state.next_horizon
    text = f"{_STATE_MAGIC}\n{state.clean_end} {horizon}\n"
    io.write_file_atomic(directory / STATE_FILE, text.encode(), durable=False)

"""``mq storage``: offline admin tools for log files, ``dump``, ``verify``, ``repair``, ``keygen``.

Both commands only read files, so they are safe on a running broker's data
dir too (an active segment may then end mid-batch). The reading and checking
live in :mod:`mq.storage.verify`; this module parses arguments and formats.
``repair`` rewrites files (:mod:`mq.storage.scrub`'s ``cut`` and ``skip``) and
refuses to run while a broker holds the data dir.
Exit codes: 0 when all is well, 1 when ``verify`` finds a bad batch or a file
cannot be read, 2 for usage errors such as a missing path.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
from collections.abc import Iterable
from contextlib import closing
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from mq.errors import MQError
from mq.records.batch import NO_TIMESTAMP
from mq.storage import scrub
from mq.storage.keyfile import add_key
from mq.storage.verify import (
    BadBatch,
    BatchInfo,
    Damage,
    DumpEntry,
    dump_segment,
    partition_segments,
    verify,
)

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_COLUMNS = (
    ("POSITION", 12),
    ("BASE OFFSET", 12),
    ("LAST OFFSET", 12),
    ("RECORDS", 8),
    ("BYTES", 10),
    ("FIRST TIMESTAMP", -24),
    ("MAX TIMESTAMP", -24),
    ("CODEC", -6),
    ("CRC", 0),
)
"""Dump table columns: title and width, negative for left-aligned, 0 for none (the
last). Widths are fixed so that millions of batches stream without buffering."""


@click.group()
def storage() -> None:
    """Inspect and check log files on disk (the broker need not run)."""


@storage.command()
@click.argument("segment_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per line.")
def dump(segment_file: Path, as_json: bool) -> None:
    """Print one line per batch of SEGMENT_FILE (a .log file).

    Shows base and last offset, record count, size, timestamp range and
    whether the CRC holds. A batch with a bad CRC is marked and the dump goes
    on; where the structure breaks (bad length, partial batch) it stops,
    since the following batch boundaries are lost.
    """
    log.info("dumping %s", segment_file)
    try:
        with closing(dump_segment(segment_file)) as entries:
            if as_json:
                for entry in entries:
                    click.echo(json.dumps(_entry_json(entry)))
            else:
                _print_table(entries)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise  # stdout went away (| head): click exits quietly
        raise click.ClickException(f"cannot read {segment_file}: {exc.strerror or exc}") from exc


@storage.command("keygen")
@click.argument("key_file", type=click.Path(dir_okay=False, path_type=Path))
def keygen(key_file: Path) -> None:
    """Add a new random AES-256 key to KEY_FILE (created mode 600 if missing).

    The new key gets the next id and encrypts from the brokers' next start (or
    SIGHUP); the older keys stay in the file and decrypt what they encrypted.
    Give every broker of a cluster the same file (``mq serve
    --encryption-key-file KEY_FILE``).
    """
    try:
        key_id = add_key(key_file)
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"cannot write {key_file}: {exc.strerror or exc}") from exc
    click.echo(f"added key {key_id} to {key_file}")


@storage.command("verify")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
def verify_command(path: Path) -> None:
    """Check every batch under PATH: a segment file, a partition dir or a data dir.

    Checks structure, magic byte and CRC of each batch and that offsets never
    go back, as recovery would. Exits 0 with a summary when all is valid;
    otherwise exits 1 naming the file, byte position and offset of each
    damaged partition's first bad batch, and why it is bad.
    """
    log.info("verifying %s", path)
    try:
        report = verify(path)
    except OSError as exc:
        raise click.ClickException(
            f"cannot read {exc.filename or path}: {exc.strerror or exc}"
        ) from exc
    if report.files == 0:
        raise click.ClickException(f"no segment files (<20-digit offset>.log) under {path}")
    summary = (
        f"{_count(report.files, 'file')}, "
        f"{_count(report.batches, 'valid batch', 'valid batches')}, "
        f"{_count(report.bytes, 'byte')} checked"
    )
    if report.padding_bytes:
        summary += f" (plus {_count(report.padding_bytes, 'byte')} of zero padding)"
    if report.ok:
        click.echo(f"OK: {summary}")
        return
    for error in report.errors:
        click.echo(f"BAD: {_describe(error)}")
    failed = _count(len(report.errors), "bad batch", "bad batches")
    click.echo(f"FAILED: {failed} (the first of each damaged partition); {summary}")
    click.get_current_context().exit(1)


MAX_REPAIR_STEPS = 10_000
"""Skips in one partition at most (each drops one damaged batch or a segment's rest):
more damage than that is not bit rot, and the operator should look first."""


@storage.command("repair")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--cut", "mode", flag_value="cut", help="Truncate the log at its first damage.")
@click.option(
    "--skip",
    "mode",
    flag_value="skip",
    help="Drop only the damaged batches; every other offset stays where it is.",
)
def repair_command(path: Path, mode: str | None) -> None:
    """Repair damaged logs under PATH (a partition dir or a data dir) with no healthy copy.

    For a partition that no in-sync replica can repair (one replica, or every
    copy damaged): --cut truncates the log at the first damaged batch
    (everything after it goes, as recovery would); --skip drops only the
    damaged batches and keeps every other offset (consumers skip the gap, as
    after compaction). The broker must be stopped. Exits 0 after repairing (or
    finding nothing to repair), 1 on an error.
    """
    if mode is None:
        raise click.UsageError("say how: --cut or --skip")
    _require_stopped(path)
    partitions = [path] if partition_segments(path) else _partition_dirs(path)
    if not partitions:
        raise click.ClickException(f"no segment files (<20-digit offset>.log) under {path}")
    try:
        for directory in partitions:
            _repair_partition(directory, mode)
    except OSError as exc:
        raise click.ClickException(f"{exc.filename or path}: {exc.strerror or exc}") from exc


def _repair_partition(directory: Path, mode: str) -> None:
    for _ in range(MAX_REPAIR_STEPS):
        found = scrub.scrub_partition(directory)
        if not found:
            return
        damage = found[0]
        click.echo(f"DAMAGED: {damage}")
        if mode == "cut":
            end = scrub.cut(directory, damage)
            click.echo(f"CUT: {directory.name} now ends at offset {end}")
        else:
            first, end = scrub.skip(directory, damage)
            click.echo(f"SKIPPED: {directory.name} offsets {first}-{end - 1}")
    raise click.ClickException(f"{directory}: more than {MAX_REPAIR_STEPS} damaged batches")


def _partition_dirs(path: Path) -> list[Path]:
    return sorted(d for d in path.iterdir() if d.is_dir() and partition_segments(d))


def _require_stopped(path: Path) -> None:
    """Refuse to touch a data dir that a running broker holds (its ``.lock``)."""
    for lock in (path / ".lock", path.parent / ".lock"):
        if not lock.exists():
            continue
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise click.ClickException(
                f"a broker is running on {lock.parent}: stop it first"
            ) from None
        finally:
            os.close(fd)


def _describe(bad: BadBatch) -> str:
    if bad.offset is None:
        offset = "offset unknown"
    elif bad.offset_from_header:
        offset = f"offset {bad.offset}"
    else:
        offset = f"expected offset {bad.offset} (header unreadable)"
    return f"{bad.path} at byte {bad.position}, {offset}: {bad.reason}"


def _print_table(entries: Iterable[DumpEntry]) -> None:
    click.echo(" ".join(_cell(title, width) for title, width in _COLUMNS))
    batches = bad_crc = records = size = 0
    ending = "end of file"
    for entry in entries:
        if isinstance(entry, BatchInfo):
            click.echo(_batch_row(entry))
            batches += 1
            bad_crc += not entry.crc_ok
            records += entry.records
            size += entry.size
        elif isinstance(entry, Damage):
            ending = f"damage at byte {entry.position}"
            click.echo(
                f"{entry.position:>12} DAMAGED: {entry.reason}; batch boundaries are lost from here"
            )
        else:
            ending = f"{_count(entry.size, 'byte')} of zero padding"
            click.echo(f"{entry.position:>12} zero padding: {_count(entry.size, 'byte')}")
    crc_note = f", {bad_crc} with a BAD CRC" if bad_crc else ""
    click.echo(
        f"{_count(batches, 'batch', 'batches')}{crc_note}, {_count(records, 'record')}, "
        f"{_count(size, 'byte')}; then {ending}"
    )


def _batch_row(b: BatchInfo) -> str:
    values = (
        b.position,
        b.base_offset,
        b.last_offset,
        b.records,
        b.size,
        _timestamp(b.base_timestamp),
        _timestamp(b.max_timestamp),
        b.codec_name,
        "ok" if b.crc_ok else "BAD",
    )
    return " ".join(_cell(v, width) for v, (_, width) in zip(values, _COLUMNS, strict=True))


def _cell(value: object, width: int) -> str:
    return f"{value!s:<{-width}}" if width < 0 else f"{value!s:>{width}}"


def _timestamp(ms: int) -> str:
    """ISO 8601 in UTC to the millisecond; ``-`` for none, the raw number if out of range."""
    if ms == NO_TIMESTAMP:
        return "-"
    try:
        stamp = (_EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return stamp.replace("+00:00", "Z")


def _entry_json(entry: DumpEntry) -> dict[str, Any]:
    kind = "batch" if isinstance(entry, BatchInfo) else type(entry).__name__.lower()
    fields = asdict(entry)
    if isinstance(entry, BatchInfo):
        fields["codec_name"] = entry.codec_name
    return {"type": kind, **fields}


def _count(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"

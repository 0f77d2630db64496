"""``mq storage repair --cut | --skip`` on a damaged data dir (no broker running)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from mq_cli.main import main

from mq.records.batch import HEADER_SIZE, parse_header
from mq.records.records import build_batch
from mq.storage.config import LogConfig
from mq.storage.log import Log
from mq.storage.verify import partition_segments, verify

CONFIG = LogConfig(segment_bytes=64 * 1024, max_message_bytes=32 * 1024)
BATCHES = 200


def _records(count: int, first: int) -> bytes:
    return bytes(build_batch([(None, b"v%d" % (first + i) * 30, [], 5) for i in range(count)]))


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, int, int]:
    """A data dir whose partition has one flipped record byte in its second segment:
    (data dir, first offset of the damaged batch, its last offset)."""
    directory = tmp_path / "data" / "t-0"
    log = Log.open(directory, CONFIG)
    for n in range(BATCHES):
        log.append(_records(8, 8 * n))
    log.close()
    path = partition_segments(directory)[1]
    data = bytearray(path.read_bytes())
    pos = parse_header(data, 0).size
    header = parse_header(data, pos)
    data[pos + HEADER_SIZE + 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert not verify(directory).ok
    return tmp_path / "data", header.base_offset, header.last_offset


def _offsets(directory: Path) -> list[int]:
    log = Log.open(directory, CONFIG)
    try:
        out, offset = [], log.log_start_offset
        while (found := log.read(offset, 1 << 20)) is not None:
            data, pos = bytes(found.data), 0
            while pos < len(data):
                h = parse_header(data, pos)
                out += range(h.base_offset, h.last_offset + 1)
                pos += h.size
            offset = found.next_offset
        return out
    finally:
        log.close()


def test_cut_truncates_at_the_damage(damaged: tuple[Path, int, int]) -> None:
    data_dir, first, _ = damaged
    result = CliRunner().invoke(main, ["storage", "repair", str(data_dir), "--cut"])
    assert result.exit_code == 0, result.output
    assert f"CUT: t-0 now ends at offset {first}" in result.output
    assert verify(data_dir).ok
    assert _offsets(data_dir / "t-0") == list(range(first))


def test_skip_drops_only_the_damaged_batch(damaged: tuple[Path, int, int]) -> None:
    data_dir, first, last = damaged
    result = CliRunner().invoke(main, ["storage", "repair", str(data_dir / "t-0"), "--skip"])
    assert result.exit_code == 0, result.output
    assert f"SKIPPED: t-0 offsets {first}-{last}" in result.output
    assert verify(data_dir).ok
    assert _offsets(data_dir / "t-0") == [o for o in range(8 * BATCHES) if not first <= o <= last]
    again = CliRunner().invoke(main, ["storage", "repair", str(data_dir), "--skip"])
    assert again.exit_code == 0
    assert "SKIPPED" not in again.output


def test_repair_needs_a_mode_and_a_stopped_broker(damaged: tuple[Path, int, int]) -> None:
    data_dir, _, _ = damaged
    result = CliRunner().invoke(main, ["storage", "repair", str(data_dir)])
    assert result.exit_code == 2
    assert "--cut or --skip" in result.output
    fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running broker holds
        result = CliRunner().invoke(main, ["storage", "repair", str(data_dir), "--cut"])
    finally:
        os.close(fd)
    assert result.exit_code == 1
    assert "a broker is running" in result.output
    assert not verify(data_dir).ok  # untouched

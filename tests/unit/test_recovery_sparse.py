"""Recovery skips the holes of a preallocated segment but not the data in them."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from mq.records.records import build_batch
from mq.storage.log import Log


def test_bytes_far_out_in_the_preallocated_tail_are_found(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = Log.open(tmp_path)  # default 1 GiB segment: a sparse file
    for _ in range(20):
        log.append(build_batch([(None, b"x" * 1000, [], 5)] * 10))
    end = log.segments[-1].size
    del log  # a crash: the file keeps its preallocated size
    fd = os.open(tmp_path / "00000000000000000000.log", os.O_RDWR)
    os.pwrite(fd, b"\x01stray", 600_000_000)
    os.close(fd)
    with caplog.at_level(logging.WARNING):
        log = Log.open(tmp_path)
    assert log.next_offset == 200
    assert f"dropped {600_000_000 + 6 - end} bytes" in caplog.text
    log.close()


def test_an_untouched_tail_drops_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = Log.open(tmp_path)
    log.append(build_batch([(None, b"x", [], 5)]))
    del log
    with caplog.at_level(logging.WARNING):
        log = Log.open(tmp_path)
    assert log.next_offset == 1
    assert "dropped" not in caplog.text
    log.close()

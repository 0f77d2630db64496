"""A sealed segment cut exactly at a batch boundary: every batch left is sound, yet it is found.

A real Log with small segments is written and closed; a sealed segment's file
is cut at the start of one of its batches (the last one, or earlier ones).
Reopened, the segment knows from its own synced indexes that it ended later
(:attr:`Segment.indexed_end`), and a scrub given that end reports the cut
range; a scrub of the same bytes without it finds nothing (what was missed).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafka_batches import T0, kafka_batch

from mq.records.batch import parse_header
from mq.storage import scrub
from mq.storage.config import LogConfig
from mq.storage.log import Log

CONFIG = LogConfig(segment_bytes=64 * 1024, max_message_bytes=32 * 1024)
BATCHES = 180
RECORDS = 16


def _write(directory: Path) -> None:
    log = Log.open(directory, CONFIG)
    for n in range(BATCHES):
        log.append(kafka_batch(0, RECORDS, T0 + n))
    log.close()


def _starts(path: Path) -> list[tuple[int, int]]:
    """(position, base offset) of every batch of a segment file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        header = parse_header(data, pos)
        out.append((pos, header.base_offset))
        pos += header.size
    return out


@pytest.mark.parametrize("cut_batches", [1, 2, 5])
def test_a_cut_at_a_batch_boundary_is_found_after_a_restart(
    tmp_path: Path, cut_batches: int
) -> None:
    directory = tmp_path / "t-0"
    _write(directory)
    log = Log.open(directory, CONFIG)
    sealed = log.segments[1]
    path, base = sealed.path, sealed.base_offset
    next_base = log.segments[2].base_offset
    assert sealed.next_offset == next_base
    log.close()

    position, first_cut = _starts(path)[-cut_batches]
    os.truncate(path, position)
    # what the scrub saw before: sound batches, a gap before the next segment (allowed)
    assert scrub.scrub_segment(path, base, next_base=next_base) is None

    log = Log.open(directory, CONFIG)
    try:
        segment = next(s for s in log.segments if s.base_offset == base)
        assert segment.next_offset == first_cut
        assert segment.indexed_end is not None
        assert segment.indexed_end > first_cut
        damage = scrub.scrub_segment(
            segment.path,
            base,
            next_base=next_base,
            min_end=max(segment.next_offset, segment.indexed_end),
        )
        assert damage is not None
        assert damage.first_offset == first_cut
        assert damage.position == position
        assert "cut short" in damage.reason
        # the sound segments are not reported
        for other in log.segments[:-1]:
            if other.base_offset != base:
                assert other.indexed_end is None
    finally:
        log.close()


def test_a_cut_while_the_log_is_open_is_found_from_its_end(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _write(directory)
    log = Log.open(directory, CONFIG)
    try:
        sealed = log.segments[0]
        position, first_cut = _starts(sealed.path)[-1]
        os.truncate(sealed.path, position)
        damage = scrub.scrub_segment(
            sealed.path,
            sealed.base_offset,
            next_base=log.segments[1].base_offset,
            min_end=sealed.next_offset,
        )
        assert damage is not None
        assert damage.first_offset == first_cut
    finally:
        log.close()


def test_sound_segments_reach_their_end(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _write(directory)
    log = Log.open(directory, CONFIG)
    try:
        for n, segment in enumerate(log.segments[:-1]):
            assert segment.indexed_end is None
            found = scrub.scrub_segment(
                segment.path,
                segment.base_offset,
                next_base=log.segments[n + 1].base_offset,
                min_end=segment.next_offset,
            )
            assert found is None
    finally:
        log.close()

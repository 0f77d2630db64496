"""mq.storage.scrub over segments written by a real Log: every byte flip is found.

The log is written under several leader epochs with small segments, closed,
and then each sealed segment is damaged one byte at a time (every position:
header fields inside and outside the CRC, the CRC itself, records) and
truncated at every length; the scrub must report the damaged batch (or an
earlier offset) every time, and nothing on the sound log.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_batches import T0, kafka_batch

from mq.errors import CorruptRecordError
from mq.records.batch import HEADER_SIZE, parse_header
from mq.storage import scrub
from mq.storage.config import LogConfig
from mq.storage.log import Log
from mq.storage.verify import partition_segments, verify

CONFIG = LogConfig(segment_bytes=64 * 1024, max_message_bytes=32 * 1024)
BATCHES = 180
RECORDS = 16
"""180 batches of 16 records, about 1 KiB each: three 64 KiB segments and more."""


def _write_log(directory: Path) -> list[tuple[int, int]]:
    log = Log.open(directory, CONFIG)
    for n in range(BATCHES):
        epoch = n // 60  # three leader epochs
        if epoch > log.epochs.latest_epoch:
            log.begin_epoch(epoch)
        log.append(kafka_batch(0, RECORDS, T0 + n), leader_epoch=epoch)
    epochs = [(e.epoch, e.start_offset) for e in log.epochs.entries]
    log.close()
    return epochs


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, int]]]:
    directory = tmp_path_factory.mktemp("scrub") / "t-0"
    epochs = _write_log(directory)
    assert verify(directory).ok
    assert len(partition_segments(directory)) >= 3
    return directory, epochs


def _segments(directory: Path) -> list[tuple[Path, int, int | None]]:
    paths = partition_segments(directory)
    bases = [int(p.name[:20]) for p in paths]
    return [
        (p, b, bases[n + 1] if n + 1 < len(bases) else None)
        for n, (p, b) in enumerate(zip(paths, bases, strict=True))
    ]


def _batches(data: bytes) -> list[tuple[int, int, int]]:
    """(position, base offset, last offset) of each batch of a sound segment."""
    out, pos = [], 0
    while pos < len(data):
        h = parse_header(data, pos)
        out.append((pos, h.base_offset, h.last_offset))
        pos += h.size
    return out


def _positions(data: bytes, batches: list[tuple[int, int, int]]) -> list[int]:
    """Every byte of the first, a middle and the last batch's header, and bytes of their
    records (first, last and some between): one of each position class."""
    ends = [p for p, _, _ in batches[1:]] + [len(data)]
    out: list[int] = []
    for k in (0, len(batches) // 2, len(batches) - 1):
        pos, end = batches[k][0], ends[k]
        out += range(pos, pos + HEADER_SIZE)
        out += range(pos + HEADER_SIZE, end, max(1, (end - pos - HEADER_SIZE) // 16))
        out.append(end - 1)
    return out


def test_a_sound_log_scrubs_clean(written: tuple[Path, list[tuple[int, int]]]) -> None:
    directory, epochs = written
    for path, base, next_base in _segments(directory)[:-1]:
        assert scrub.scrub_segment(path, base, next_base=next_base, epochs=epochs) is None
    assert scrub.scrub_partition(directory) == []


def test_pace_is_told_every_byte(written: tuple[Path, list[tuple[int, int]]]) -> None:
    directory, _ = written
    path, base, next_base = _segments(directory)[0]
    told: list[int] = []
    assert scrub.scrub_segment(path, base, next_base=next_base, pace=told.append) is None
    assert sum(told) == path.stat().st_size


@pytest.mark.parametrize("xor", [0x01, 0x80, 0xFF])
def test_every_byte_flip_of_every_sealed_segment_is_found(
    written: tuple[Path, list[tuple[int, int]]], xor: int
) -> None:
    directory, epochs = written
    for path, base, next_base in _segments(directory)[:-1]:
        data = path.read_bytes()
        batches = _batches(data)
        for at in _positions(data, batches):
            damaged = bytearray(data)
            damaged[at] ^= xor
            found = scrub.scan_buffer(damaged, path, base, next_base=next_base, epochs=epochs)
            assert found is not None, f"flip at byte {at} of {path.name} not found"
            pos, first, _last = next(b for b in reversed(batches) if b[0] <= at)
            # the damaged batch or an earlier one (a broken length shows at its own batch)
            assert found.position <= pos, (at, found)
            assert found.first_offset <= first, (at, found)
            if found.last_offset is not None:
                assert found.last_offset >= found.first_offset


def test_header_field_flips_name_their_batch(written: tuple[Path, list[tuple[int, int]]]) -> None:
    directory, epochs = written
    path, base, next_base = _segments(directory)[1]
    data = path.read_bytes()
    pos, first, last = _batches(data)[2]
    for at in range(pos, pos + HEADER_SIZE):
        damaged = bytearray(data)
        damaged[at] ^= 0x04
        found = scrub.scan_buffer(damaged, path, base, next_base=next_base, epochs=epochs)
        assert found is not None, at
        # this batch, or the previous one when baseOffset went down (either may be wrong)
        assert found.position <= pos, at
        assert found.first_offset <= first, at
        assert found.position == pos or "goes back" in found.reason, at
    damaged = bytearray(data)
    damaged[pos + HEADER_SIZE + 3] ^= 0x10  # a record byte: the CRC catches it
    found = scrub.scan_buffer(damaged, path, base, next_base=next_base, epochs=epochs)
    assert found is not None
    assert (found.first_offset, found.last_offset) == (first, last)
    assert "CRC" in found.reason
    assert found.resume_position == pos + len(_batch(data, pos))


def _batch(data: bytes, pos: int) -> bytes:
    return data[pos : pos + parse_header(data, pos).size]


def test_every_truncation_of_a_sealed_segment_is_found(
    written: tuple[Path, list[tuple[int, int]]],
) -> None:
    directory, _ = written
    path, base, next_base = _segments(directory)[0]
    data = path.read_bytes()
    batches = _batches(data)
    # mid-batch cuts; a cut exactly at a batch boundary leaves a sound segment
    cuts = {p + d for p, _, _ in batches for d in (1, 11, 12, 60, 61, 62)}
    cuts |= set(range(1, batches[1][0])) | set(range(len(data) - 100, len(data)))
    cuts -= {p for p, _, _ in batches}
    for keep in sorted(c for c in cuts if c < len(data)):
        found = scrub.scan_buffer(data[:keep], path, base, next_base=next_base)
        assert found is not None, keep


def test_zeros_in_a_sealed_segment_are_damage(written: tuple[Path, list[tuple[int, int]]]) -> None:
    directory, _ = written
    path, base, next_base = _segments(directory)[0]
    data = path.read_bytes()
    found = scrub.scan_buffer(data + bytes(100), path, base, next_base=next_base)
    assert found is not None
    assert scrub.scan_buffer(data + bytes(100), path, base, allow_padding=True) is None


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x20
    path.write_bytes(bytes(data))


def _offsets(directory: Path) -> list[int]:
    log = Log.open(directory, CONFIG)
    try:
        out, offset = [], log.log_start_offset
        while (found := log.read(offset, 1 << 20)) is not None:
            out.extend(o for _, b, last in _batches(bytes(found.data)) for o in range(b, last + 1))
            offset = found.next_offset
        return out
    finally:
        log.close()


def test_cut_drops_the_damaged_batch_and_everything_after(
    written: tuple[Path, list[tuple[int, int]]], tmp_path: Path
) -> None:
    directory = _copy(written[0], tmp_path / "t-0")
    path, _base, _next_base = _segments(directory)[1]
    pos, first, _ = _batches(path.read_bytes())[1]
    _flip(path, pos + HEADER_SIZE + 1)
    [damage] = scrub.scrub_partition(directory)
    assert damage.first_offset == first
    assert scrub.cut(directory, damage) == first
    assert scrub.scrub_partition(directory) == []
    assert verify(directory).ok
    assert _offsets(directory) == list(range(first))


def test_skip_keeps_every_other_offset(
    written: tuple[Path, list[tuple[int, int]]], tmp_path: Path
) -> None:
    directory = _copy(written[0], tmp_path / "t-0")
    path, _base, _next_base = _segments(directory)[1]
    pos, first, last = _batches(path.read_bytes())[1]
    _flip(path, pos + HEADER_SIZE + 1)
    [damage] = scrub.scrub_partition(directory)
    assert scrub.skip(directory, damage) == (first, last + 1)
    assert scrub.scrub_partition(directory) == []
    assert verify(directory).ok
    expected = [o for o in range(RECORDS * BATCHES) if not first <= o <= last]
    assert _offsets(directory) == expected


def test_skip_of_a_broken_length_drops_the_rest_of_the_segment(
    written: tuple[Path, list[tuple[int, int]]], tmp_path: Path
) -> None:
    directory = _copy(written[0], tmp_path / "t-0")
    path, _base, next_base = _segments(directory)[1]
    assert next_base is not None
    pos, first, _ = _batches(path.read_bytes())[1]
    _flip(path, pos + 8)  # the high byte of batchLength: boundaries lost
    [damage] = scrub.scrub_partition(directory)
    assert damage.last_offset is None
    assert scrub.skip(directory, damage) == (first, next_base)
    assert scrub.scrub_partition(directory) == []
    expected = [o for o in range(RECORDS * BATCHES) if not first <= o < next_base]
    assert _offsets(directory) == expected


def test_a_damaged_sealed_segment_is_replaced_in_place_from_a_healthy_copy(
    written: tuple[Path, list[tuple[int, int]]], tmp_path: Path
) -> None:
    healthy = written[0]
    directory = _copy(healthy, tmp_path / "t-0")
    log = Log.open(directory, CONFIG)
    try:
        segments = log.segments
        damaged, following = segments[1], segments[2]
        good = (healthy / damaged.path.name).read_bytes()
        _flip(damaged.path, HEADER_SIZE + 1)  # in place, under the open log's map
        with pytest.raises(CorruptRecordError):
            log.read(damaged.base_offset, 1 << 20)
        bad = bytearray(good)
        bad[HEADER_SIZE + 1] ^= 0x20
        with pytest.raises(ValueError, match="not sound"):
            scrub.check_replacement(bad, damaged.path, damaged.base_offset, following.base_offset)
        with pytest.raises(ValueError, match="ends at offset"):
            scrub.check_replacement(
                good[: _batches(good)[-1][0]],
                damaged.path,
                damaged.base_offset,
                following.base_offset,
            )
        scrub.check_replacement(good, damaged.path, damaged.base_offset, following.base_offset)
        aside = scrub.write_aside(damaged.path, good)
        scrub.replace_sealed(log, damaged.base_offset, aside)
        assert not aside.exists()
        assert log.segments[1] is not damaged
        found = log.read(damaged.base_offset, 1 << 20)
        assert found is not None
        assert found.first_offset == damaged.base_offset
    finally:
        log.close()
    assert scrub.scrub_partition(directory) == []
    assert _offsets(directory) == list(range(RECORDS * BATCHES))
    for name in ("00000000000000000000.log", damaged.path.name):
        assert (directory / name).read_bytes() == (healthy / name).read_bytes()

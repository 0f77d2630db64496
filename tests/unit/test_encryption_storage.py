"""Encryption at rest in the storage engine: compaction, verify, scrub and timestamp lookups."""

from __future__ import annotations

from pathlib import Path

import pytest

from mq.records.batch import HEADER_SIZE, parse_header
from mq.records.encryption import Keyring, stored_key_id
from mq.records.records import build_batch, decode_records
from mq.storage import cleaner, scrub
from mq.storage.config import KiB, LogConfig
from mq.storage.log import Log
from mq.storage.verify import partition_segments, verify

KEY1, KEY2 = bytes(range(32)), bytes(range(1, 33))
T0 = 1_700_000_000_000
SECRET = b"compacted-secret-"
CONFIG = LogConfig(
    segment_bytes=64 * KiB,
    index_interval_bytes=1024,
    max_message_bytes=32 * KiB,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.0,
)


class Clock:
    now = T0

    def __call__(self) -> int:
        return self.now


def fill(log: Log, rounds: int, keys: int, start: int = 0) -> None:
    for i in range(start, start + rounds):
        batch = build_batch([(b"k%d" % (i % keys), SECRET + b"%d;" % i + b"." * 600, [], T0 + i)])
        log.append(batch)


def stored(log: Log) -> list[tuple[int, int | None]]:
    """(base offset, key id) of every stored batch."""
    out: list[tuple[int, int | None]] = []
    offset = log.log_start_offset
    while (found := log.read(offset, 1 << 20)) is not None:
        pos = 0
        while pos < len(found.data):
            header = parse_header(found.data, pos)
            out.append((header.base_offset, stored_key_id(found.data, pos)))
            pos += header.size
        offset = found.next_offset
    return out


def plain_records(log: Log) -> dict[bytes, tuple[int, bytes]]:
    """key -> (offset, value) of the newest record of each key, read in clear."""
    out: dict[bytes, tuple[int, bytes]] = {}
    offset = log.log_start_offset
    while (found := log.read_plain(offset, 1 << 20)) is not None:
        data, pos = bytes(found.data), 0
        while pos < len(data):
            size = parse_header(data, pos).size
            for r in decode_records(data[pos : pos + size]):
                assert r.key is not None
                assert r.value is not None
                out[r.key] = (r.offset, r.value)
            pos += size
        offset = found.next_offset
    return out


def clean(log: Log) -> cleaner.CleanJob:
    job = log.begin_clean()
    assert job is not None
    job.run()
    assert job.error is None, job.error
    assert log.end_clean(job)
    return job


def files_holding(directory: Path, needle: bytes) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_compaction_opens_compacts_and_seals_with_the_newest_key(tmp_path: Path) -> None:
    directory = tmp_path / "table-0"
    log = Log.open(directory, CONFIG, clock=Clock(), keyring=Keyring({1: KEY1}))
    fill(log, 400, keys=20)
    log.close()
    ring = Keyring({1: KEY1, 2: KEY2})  # rotated: key 2 encrypts now
    log = Log.open(directory, CONFIG, clock=Clock(), keyring=ring)
    fill(log, 200, keys=20, start=400)
    log.flush()
    before = plain_records(log)
    assert before == {
        b"k%d" % k: (i, SECRET + b"%d;" % i + b"." * 600) for k in range(20) for i in [580 + k]
    }
    job = clean(log)
    assert job.records_dropped > 0
    assert plain_records(log) == before
    ids = stored(log)
    cleaned = [key_id for base, key_id in ids if base < job.state.clean_end]
    assert cleaned
    assert set(cleaned) == {2}  # every batch the pass wrote is under the newest key
    log.close()
    assert files_holding(directory, SECRET) == []
    reopened = Log.open(directory, CONFIG, clock=Clock(), keyring=Keyring({2: KEY2}))
    assert plain_records(reopened) == before  # key 1 is no longer needed
    reopened.close()


def test_compaction_seals_batches_written_before_encryption_was_on(tmp_path: Path) -> None:
    directory = tmp_path / "table-0"
    log = Log.open(directory, CONFIG, clock=Clock())
    fill(log, 300, keys=300)  # every key once: the pass drops nothing
    log.close()
    assert files_holding(directory, SECRET)
    log = Log.open(directory, CONFIG, clock=Clock(), keyring=Keyring({1: KEY1}))
    before = plain_records(log)
    job = clean(log)
    assert job.records_dropped == 0
    assert plain_records(log) == before
    assert {k for base, k in stored(log) if base < job.state.clean_end} == {1}
    log.close()
    closed = [p for p in partition_segments(directory)][:-1]
    assert not any(SECRET in p.read_bytes() for p in closed)


def test_compaction_without_the_key_fails_and_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    directory = tmp_path / "table-0"
    log = Log.open(directory, CONFIG, clock=Clock(), keyring=Keyring({1: KEY1}))
    fill(log, 300, keys=10)
    log.close()
    log = Log.open(directory, CONFIG, clock=Clock(), keyring=Keyring({2: KEY2}))
    job = log.begin_clean()
    assert job is not None
    job.run()
    assert job.error is not None
    assert "key id 1" in str(job.error)
    assert not log.end_clean(job)
    assert len(stored(log)) == 300
    log.close()


def test_verify_and_scrub_check_encrypted_segments_without_a_key(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(
        directory, CONFIG.with_overrides({"cleanup.policy": "delete"}), keyring=Keyring({1: KEY1})
    )
    fill(log, 300, keys=300)
    log.close()
    assert verify(directory).ok
    segments = partition_segments(directory)
    assert len(segments) >= 3
    assert scrub.scrub_partition(directory) == []
    path = segments[1]
    data = path.read_bytes()
    second = parse_header(data).size
    for at in (second + 10, second + HEADER_SIZE + 2, second + HEADER_SIZE + 40, len(data) - 1):
        damaged = bytearray(data)  # the key id, the ciphertext, the tag, a header field
        damaged[at] ^= 0x01
        path.write_bytes(damaged)
        report = verify(directory)
        assert not report.ok, at
        found = scrub.scrub_partition(directory)
        assert found, at
        assert found[0].path == path
    path.write_bytes(data)
    assert verify(directory).ok


def test_timestamp_lookups_open_the_batch(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), keyring=Keyring({1: KEY1}))
    log.append(build_batch([(b"a", b"x", [], T0), (b"b", b"y", [], T0 + 10)]))
    assert log.offset_for_timestamp(T0 + 5) == (1, T0 + 10)
    log.close()


@pytest.mark.parametrize("keyring", [None, Keyring({1: KEY1})])
def test_a_follower_stores_the_leaders_bytes_as_they_are(
    tmp_path: Path, keyring: Keyring | None
) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig(), keyring=Keyring({1: KEY1}))
    leader.append(build_batch([(b"a", SECRET, [], T0)]), leader_epoch=2)
    found = leader.read(0, 1 << 20)
    assert found is not None
    shipped = bytes(found.data)
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig(), keyring=keyring)
    follower.append_replicated(shipped)
    again = follower.read(0, 1 << 20)
    assert again is not None
    assert bytes(again.data) == shipped
    plain = follower.read_plain(0, 1 << 20) if keyring is not None else None
    if plain is not None:
        assert [r.value for r in decode_records(plain.data)] == [SECRET]
    leader.close()
    follower.close()
    assert files_holding(tmp_path, SECRET) == []

"""A byte flipped in a closed segment of a one-replica partition, on a real broker.

No healthy copy exists, so nothing can be repaired: the broker's scrubber must
log the damage (file, offsets, replica), a consumer reading from the beginning
must get CORRUPT_DATA naming the offsets in bounded time instead of waiting
forever, and ``mq consume --from-beginning --timeout`` must exit non-zero.
Then ``mq storage repair --skip`` (broker stopped) lets every other record be
read again.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from broker_process import BrokerProcess

import mq
from mq.errors import CorruptDataError
from mq.records.batch import HEADER_SIZE, parse_header
from mq.storage.verify import partition_segments

TOPIC = "rot"
RECORDS = 3_500
SEGMENT_BYTES = 64 * 1024
SETTINGS: dict[str, int | str] = {
    "scrub_bytes_per_sec": 64 * 1024 * 1024,
    "scrub_interval_ms": 1_000,
}
"""A fast scrub, so that one pass over these few segments takes a moment."""
CONSUME = [sys.executable, "-m", "mq_cli.main", "consume", TOPIC, "--from-beginning"]
CONSUME += ["--timeout", "10"]
ERROR_WITHIN_S = 60.0
"""Bound on the consumer's wait for the error (the client's corrupt retries are 30 s)."""


async def _produce(bootstrap: str) -> None:
    async with mq.Admin(bootstrap=bootstrap) as admin:
        await admin.create_topic(TOPIC, partitions=1, replication_factor=1)
    async with mq.Producer(bootstrap, linger_ms=5, batch_size=4096) as producer:
        for i in range(RECORDS):
            await producer.send(TOPIC, b"value-%06d-" % i + b"x" * 150, partition=0)
        await producer.flush()


def _flip_in_second_segment(directory: Path) -> tuple[Path, int]:
    """Flip one record byte of the third batch of the second segment; its first offset."""
    segments = partition_segments(directory)
    assert len(segments) >= 3, segments
    path = segments[1]
    data = bytearray(path.read_bytes())
    pos = 0
    for _ in range(2):
        pos += parse_header(data, pos).size
    first = parse_header(data, pos).base_offset
    data[pos + HEADER_SIZE + 5] ^= 0x40
    path.write_bytes(bytes(data))
    return path, first


async def _consume_until_error(bootstrap: str) -> tuple[list[int], BaseException | None]:
    offsets: list[int] = []
    async with mq.Consumer(TOPIC, bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + ERROR_WITHIN_S
        while time.monotonic() < deadline and (not offsets or offsets[-1] < RECORDS - 1):
            try:
                batches = await consumer.getmany(timeout_ms=500)
            except CorruptDataError as exc:
                return offsets, exc
            offsets.extend(r.offset for rs in batches.values() for r in rs)
    return offsets, None


@pytest.fixture(params=["scrubbing", "scrub off"])
def rotten(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[BrokerProcess, Path, int]:
    """Damaged data under a broker that scrubs, or one that does not (the read reports it)."""
    settings = SETTINGS if request.param == "scrubbing" else {"scrub_bytes_per_sec": 0}
    broker = BrokerProcess(
        tmp_path / "data",
        settings=settings,
        log_settings={"segment.bytes": SEGMENT_BYTES, "max.message.bytes": SEGMENT_BYTES // 2},
    )
    broker.start()
    try:
        asyncio.run(_produce(broker.bootstrap))
    finally:
        broker.stop()
    path, first = _flip_in_second_segment(tmp_path / "data" / f"{TOPIC}-0")
    return broker, path, first


def test_no_healthy_copy_fails_reads_with_the_offsets_and_the_cli_exits_non_zero(
    rotten: tuple[BrokerProcess, Path, int],
) -> None:
    broker, path, first = rotten
    broker.start()
    try:
        offsets, error = asyncio.run(_consume_until_error(broker.bootstrap))
        assert isinstance(error, CorruptDataError), (len(offsets), error)
        assert offsets == list(range(first))
        assert f"offsets {first}-" in error.message
        assert any("scrub" in line and str(path.name) in line for line in broker.output), (
            "the scrubber logged nothing about the damaged file"
        )

        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        done = subprocess.run(
            [*CONSUME, "--bootstrap", broker.bootstrap],
            capture_output=True,
            timeout=ERROR_WITHIN_S + 30,
            env=env,
        )
        assert done.returncode != 0, done.stderr.decode()
        assert b"CORRUPT_DATA" in done.stderr
        assert f"{first} messages".encode() in done.stderr
    finally:
        broker.stop()

    # the operator skips the damaged batch: every other record reads again
    repaired = subprocess.run(
        [sys.executable, "-m", "mq_cli.main", "storage", "repair", str(path.parent), "--skip"],
        capture_output=True,
        timeout=60,
    )
    assert repaired.returncode == 0, repaired.stderr.decode()
    broker.start()
    try:
        offsets, error = asyncio.run(_consume_until_error(broker.bootstrap))
    finally:
        broker.stop()
    assert error is None
    assert offsets[:first] == list(range(first))
    assert len(offsets) < RECORDS  # the damaged batch's records are gone
    assert offsets == sorted(set(offsets))
    assert offsets[-1] == RECORDS - 1

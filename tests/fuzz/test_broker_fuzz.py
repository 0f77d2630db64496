"""Fuzz a live broker: 100,000 random and damaged frames leave it serving and its data intact.

A real ``mq serve`` process gets a topic of known records (produced with the
client library, ``acks="all"``), then exactly :data:`FRAMES` frames over
:data:`LANES` concurrent connections (see live_fuzz.py), each lane drawing
from its own ``random.Random`` seeded from :data:`SEED`. ``MQ_FUZZ_SEED=n``
picks another seed; the seed is in every failure message, and a lane's
frames depend on it alone, so a failure replays. The frames: valid requests of
every API; the same with fields broken (wrong types, taken out, huge or
negative numbers, huge lists and strings); random msgpack documents; random
bytes behind right, zero, oversized or truncated length prefixes; valid
frames with bytes flipped, cut or inserted; produce requests with whole,
damaged (CRC, lengths, magic, counts, timestamps) and odd record batches.

Every answer is checked as it comes (live_fuzz.py says how). Afterwards the
broker must still run, answer api_versions and metadata, serve a new produce
and fetch, hold in the known topic exactly the known records plus the fuzz's
own acknowledged appends at their offsets, have logged no traceback, and
after a clean restart still hold the same data.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from live_fuzz import KnownLog, Lane, Record
from wire_random import KNOWN_TOPIC, OFFSETS_TOPIC, SCRATCH_TOPICS

import mq
from mq.records import batch as fmt
from mq.records.records import Header, decode_records
from mq.wire import apis_core, apis_data
from mq.wire.frames import FrameDecoder
from mq.wire.messages import decode_response, encode_request
from mq.wire.registry import Api

SEED = int(os.environ.get("MQ_FUZZ_SEED", "20240611"))
FRAMES = 100_000
LANES = 8
KNOWN_PARTITIONS = 2
KNOWN_RECORDS = 300
FUZZ_TIMEOUT_S = 150.0
TEST_TIMEOUT_S = 240.0
SEGMENT_BYTES = 16 << 20
"""Small segments (as the restartable brokers of tests/integration) keep the restart quick."""


class Raw:
    """One connection, one request at a time: for the checks after the fuzz."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder: FrameDecoder[bytes] = FrameDecoder()
        self.cid = 0

    @classmethod
    async def connect(cls, broker: BrokerProcess) -> Raw:
        return cls(*await asyncio.open_connection(broker.host, broker.port))

    async def call(self, api: Api[Any, Any], body: Any) -> Any:
        self.cid += 1
        self.writer.write(encode_request(api, 0, self.cid, "fuzz-check", body))
        while True:
            for payload in self.decoder.frames():
                response = decode_response(payload, api, 0)
                assert response.correlation_id == self.cid
                return response.result()
            data = await self.reader.read(1 << 20)
            assert data, "the broker closed the connection"
            self.decoder.feed(data)

    async def read_partition(self, topic: str, partition: int) -> dict[int, Record]:
        """Every record of a partition, by offset, from offset 0 to the high watermark."""
        out: dict[int, Record] = {}
        offset = 0
        while True:
            wanted = {
                "partition": partition,
                "fetch_offset": offset,
                "partition_max_bytes": 1 << 20,
            }
            body = {
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "topics": [{"name": topic, "partitions": [wanted]}],
            }
            part = (await self.call(apis_data.FETCH, body))["topics"][0]["partitions"][0]
            assert part["error"] == 0, part
            assert part["log_start_offset"] == 0, part
            data = part["records"]
            if not data:
                assert offset == part["high_watermark"], (offset, part)
                return out
            pos = 0
            for header in fmt.iter_batches(data):
                for record in decode_records(data[pos : pos + header.size]):
                    out[record.offset] = (record.key, record.value, record.headers)
                pos += header.size
                offset = header.next_offset

    def close(self) -> None:
        self.writer.close()


async def produce_known(broker: BrokerProcess) -> KnownLog:
    """The known topic's records, produced by the client library with acks="all"."""
    known = KnownLog(KNOWN_PARTITIONS)
    async with mq.Admin(broker.bootstrap) as admin:
        await admin.create_topic(KNOWN_TOPIC, KNOWN_PARTITIONS)
        for name in SCRATCH_TOPICS:
            await admin.create_topic(name, 2)
    rng = random.Random(SEED)
    for codec in (None, "zstd"):
        async with mq.Producer(broker.bootstrap, acks="all", compression_type=codec) as producer:
            futures = []
            for i in range(KNOWN_RECORDS // 2):
                key = None if i % 7 == 0 else b"key-%d" % i
                value = rng.randbytes(rng.choice((0, 10, 500)))
                headers: list[Header] = [("n", b"%d" % i)] if i % 3 == 0 else []
                future = await producer.send(KNOWN_TOPIC, value, key, headers, i % KNOWN_PARTITIONS)
                futures.append((future, (key, value, tuple(headers))))
            for future, record in futures:
                meta = await future
                known.add(meta.partition, meta.offset, [record], "the known records")
    assert not known.failures, known.failures
    return known


async def fuzz(broker: BrokerProcess, known: KnownLog) -> tuple[list[str], Counter[str]]:
    """Send FRAMES frames over LANES connections at a time; the failures and statistics."""
    failures: list[str] = []
    stats: Counter[str] = Counter()
    known.failures = failures
    shares = [FRAMES // LANES + (i < FRAMES % LANES) for i in range(LANES)]
    lanes = [
        Lane(SEED, i, broker.host, broker.port, share, known, failures, stats)
        for i, share in enumerate(shares)
    ]
    try:
        async with asyncio.timeout(FUZZ_TIMEOUT_S), asyncio.TaskGroup() as group:
            for lane in lanes:
                group.create_task(lane.run())
    except TimeoutError:
        failures.append(f"the fuzz took longer than {FUZZ_TIMEOUT_S} s")
    except ExceptionGroup as errors:  # a lane gave up on a stuck broker (already in failures)
        failures += [repr(e) for e in errors.exceptions if not isinstance(e, AssertionError)]
    stats["frames"] = sum(lane.sent for lane in lanes)
    return failures, stats


async def check_known(broker: BrokerProcess, known: KnownLog) -> None:
    """The known topic holds exactly what the known log says, offset for offset."""
    raw = await Raw.connect(broker)
    try:
        for partition in range(KNOWN_PARTITIONS):
            stored = await raw.read_partition(KNOWN_TOPIC, partition)
            expected = known.records.get(partition, {})
            missing = sorted(set(expected) - set(stored))
            extra = sorted(set(stored) - set(expected))
            changed = [o for o in sorted(set(stored) & set(expected)) if stored[o] != expected[o]]
            assert (missing, extra, changed) == ([], [], []), (
                f"seed {SEED}: {KNOWN_TOPIC}-{partition}: missing {missing[:10]}, "
                f"unexplained {extra[:10]}, changed {changed[:10]}"
            )
    finally:
        raw.close()


async def check_serving(broker: BrokerProcess) -> None:
    """api_versions, metadata, and a new record produced and read back."""
    async with mq.Producer(broker.bootstrap, acks="all") as producer:
        meta = await producer.send_and_wait("fuzz-after", b"still here", b"k")
    raw = await Raw.connect(broker)
    try:
        served = {api["name"] for api in (await raw.call(apis_core.API_VERSIONS, {}))["apis"]}
        assert {"produce", "fetch", "metadata"} <= served
        names = {t["name"] for t in (await raw.call(apis_core.METADATA, {}))["topics"]}
        assert {KNOWN_TOPIC, OFFSETS_TOPIC, "fuzz-after"} <= names
        stored = await raw.read_partition("fuzz-after", meta.partition)
        assert stored[meta.offset][:2] == (b"k", b"still here")
    finally:
        raw.close()


@pytest.mark.slow
async def test_a_hundred_thousand_bad_frames_leave_the_broker_serving_and_data_intact(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "data", segment_bytes=SEGMENT_BYTES)
    broker.start()
    started = time.monotonic()
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            known = await produce_known(broker)
            failures, stats = await fuzz(broker, known)
            summary = f"seed {SEED} (MQ_FUZZ_SEED), {dict(sorted(stats.items()))}"
            print(f"fuzzed in {time.monotonic() - started:.1f} s: {summary}")
            assert broker.proc is not None
            assert broker.proc.poll() is None, f"{summary}: died: {''.join(broker.output)[-3000:]}"
            assert not failures, (
                f"{summary}: {len(failures)} failures: {failures[:10]}; "
                f"the broker's log ends with: {''.join(broker.output)[-2000:]}"
            )
            assert stats["frames"] == FRAMES, summary
            await check_serving(broker)
            await check_known(broker, known)
            await asyncio.to_thread(broker.restart)
            await check_known(broker, known)
            await check_serving(broker)
    finally:
        broker.stop()
    log = "".join(broker.output)
    assert "Traceback" not in log, f"seed {SEED}: the broker logged a traceback: {log[-5000:]}"

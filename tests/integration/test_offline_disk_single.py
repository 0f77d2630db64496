"""A full disk on a single broker: the partition reports STORAGE_ERROR, it does not hang.

The broker's data directory is a small tmpfs, filled up while a producer runs.
With no other replica to take over, produces fail with a clear STORAGE_ERROR
naming the partition and the cause (retriable: the client refreshes metadata
and retries until its delivery timeout, which then reports that error), fetches
are answered STORAGE_ERROR at once, and the broker keeps serving its other
partitions. Root only (a tmpfs mount).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess

from mq import Admin, Producer
from mq.broker.cluster_io import fetch_body
from mq.chaos.faults import disk_unavailable_reason, mount_tmpfs, unmount
from mq.errors import MQError, StorageError
from mq.wire.apis_data import FETCH

TOPIC = "full"
DISK_BYTES = 48 << 20
SEGMENT_BYTES = 128 * 1024
FILL_CHUNK = 1 << 20
MAX_FILL_CHUNKS = DISK_BYTES // FILL_CHUNK + 16
MAX_SENDS = 50_000
"""Bound on the records sent while waiting for the log to go offline."""
DELIVERY_TIMEOUT_MS = 3_000
VALUE = b"y" * 400


@pytest.fixture
def full_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    reason = disk_unavailable_reason()
    if reason:
        pytest.skip(reason)
    data = tmp_path / "data"
    mount_tmpfs(data, DISK_BYTES)
    process = BrokerProcess(
        data, log_settings={"segment.bytes": SEGMENT_BYTES, "max.message.bytes": SEGMENT_BYTES // 2}
    )
    try:
        process.start()
        yield process
    finally:
        process.stop()
        unmount(data)


def _fill(path: Path) -> None:
    with contextlib.suppress(OSError), (path / "filler").open("wb", buffering=0) as f:
        for _ in range(MAX_FILL_CHUNKS):
            try:
                f.write(b"\0" * FILL_CHUNK)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break


async def test_a_full_disk_reports_storage_error(full_broker: BrokerProcess) -> None:
    bootstrap = full_broker.bootstrap
    async with Admin(bootstrap=bootstrap) as admin:
        await admin.create_topic(TOPIC, partitions=2, replication_factor=1)
    async with Producer(
        bootstrap, acks="all", linger_ms=0, delivery_timeout_ms=DELIVERY_TIMEOUT_MS
    ) as producer:
        for i in range(100):
            await (await producer.send(TOPIC, b"%d" % i, partition=0))
            await (await producer.send(TOPIC, b"%d" % i, partition=1))
        _fill(full_broker.data_dir)
        failure: MQError | None = None
        started = time.monotonic()
        for i in range(MAX_SENDS):
            try:
                await (await producer.send(TOPIC, b"%06d-" % i + VALUE, partition=0))
            except MQError as exc:
                failure = exc
                break
        assert failure is not None, "appends on a full disk kept succeeding"
        assert time.monotonic() - started < 10 * DELIVERY_TIMEOUT_MS / 1000
        assert isinstance(failure, StorageError), repr(failure)
        assert f"{TOPIC}-0 is offline on broker" in str(failure), str(failure)
        assert "No space left on device" in str(failure), str(failure)

    # a fetch of the offline partition is answered STORAGE_ERROR at once (no long poll
    # waits on it); the broker still serves the other partition's reads
    async with Admin(bootstrap=bootstrap) as admin:
        client = admin._client
        node = (await client.fetch_all_metadata())["brokers"][0]["node_id"]
        for index in (0, 1):
            body = fetch_body(TOPIC, index, 0, 1 << 20, min_bytes=1)
            body["max_wait_ms"] = 5_000
            response = await asyncio.wait_for(await client.request(node, FETCH, body), 10)
            part = response["topics"][0]["partitions"][0]
            if index == 0:
                assert part["error"] == StorageError.code, part
                assert "is offline on broker" in part["message"], part
            else:
                assert part["error"] == 0, part
                assert part["records"], part

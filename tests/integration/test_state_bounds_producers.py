"""Issue 18, F7: a broker expires idle idempotent producers by itself (periodic task)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from inprocess_broker import running_broker

from mq import Producer

TEST_TIMEOUT_S = 60


async def test_the_broker_expires_idle_producer_ids(tmp_path: Path) -> None:
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        running_broker(
            tmp_path, producer_id_expiration_ms=1_000, producer_id_expiration_check_ms=100
        ) as running,
    ):
        async with Producer(running.bootstrap, enable_idempotence=True, acks="all") as producer:
            await producer.send("t", b"v")
            await producer.flush()
        partition = running.broker.partitions[("t", 0)]
        assert len(partition.log.producers.producers) == 1
        for _ in range(100):  # idle 1 s, then a pass every 0.1 s sees it
            if not partition.log.producers.producers:
                break
            await asyncio.sleep(0.1)
        assert partition.log.producers.producers == {}

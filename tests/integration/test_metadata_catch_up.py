"""A metadata request naming many topics the broker does not know reads the metadata
store once per chunk of names, not once per name (issue 18: 100,000 unknown names cost
100,000 reads of the store on the event loop, the largest part of the list-bound
pattern's hold on it after the audit log)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import running_broker

from mq.broker.topic_changes import CATCH_UP_CHUNK
from mq.client.connection import Connection
from mq.errors import UnknownTopicOrPartitionError
from mq.replication.store import Entry
from mq.wire import apis_core

TEST_TIMEOUT_S = 120
UNKNOWN = 10_000
"""Names asked for that no topic has: several chunks."""


async def test_unknown_topics_cost_one_store_read_per_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path / "data") as running:
            store = running.broker.store
            reads: list[int] = []  # keys per read
            get, get_many = store.get, store.get_many

            async def counted_get(key: str) -> Entry | None:
                reads.append(1)
                return await get(key)

            async def counted_get_many(keys: Any) -> dict[str, Entry]:
                keys = list(keys)
                reads.append(len(keys))
                return await get_many(keys)

            monkeypatch.setattr(store, "get", counted_get)
            monkeypatch.setattr(store, "get_many", counted_get_many)
            host, port = running.bootstrap.rsplit(":", 1)
            conn = await Connection.open(host, int(port), client_id="catch-up-test")
            try:
                await conn.call(
                    apis_core.CREATE_TOPICS,
                    {
                        "topics": [{"name": "known", "partitions": 2, "replication_factor": 1}],
                        "timeout_ms": 60_000,
                    },
                )
                reads.clear()
                names = [f"unknown-{i}" for i in range(UNKNOWN)]
                answer = await conn.call(
                    apis_core.METADATA,
                    {"topics": ["known", *names, "known"], "allow_auto_topic_creation": False},
                )
            finally:
                conn.close()
    by_name = {t["name"]: t for t in answer["topics"]}
    assert len(answer["topics"]) == UNKNOWN + 1  # "known" asked twice, answered once
    assert by_name["known"]["error"] == 0
    assert len(by_name["known"]["partitions"]) == 2
    assert {by_name[n]["error"] for n in names} == {UnknownTopicOrPartitionError.code}
    assert sum(reads) == UNKNOWN  # each unknown name looked up, the known one not
    assert len(reads) <= -(-(UNKNOWN + 2) // CATCH_UP_CHUNK), f"{len(reads)} reads of the store"

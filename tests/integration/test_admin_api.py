"""The console's JSON admin API against a real broker and a known workload.

An in-process broker (:mod:`inprocess_broker`) with the API's routes on an aiohttp
test server: every figure is checked against what the workload did
(:mod:`console_workload`): offsets and sizes of the topic, the group's committed
offsets and lag, the queue's depth by state, the last records of a partition.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from console_workload import (
    COMMITTED,
    COUNTS,
    DLQ,
    GROUP,
    QUEUE,
    TOPIC,
    Workload,
    known_workload,
    order_value,
)
from inprocess_broker import Running, running_broker

from mq import Producer
from mq.http import admin_api, admin_data, browse, console_routes
from mq.http.shared import SHARE_S

TEST_TIMEOUT_S = 90
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[Running, TestClient[Any, Any]]]:
    async with running_broker(tmp_path / "data") as running:
        app = web.Application()
        admin_api.add_routes(app, running.broker)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            yield running, client


async def get(client: TestClient[Any, Any], path: str, status: int = 200) -> Any:
    response = await client.get(path)
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    return await response.json()


async def settled_queue(client: TestClient[Any, Any], **expected: int) -> dict[str, Any]:
    """The queue's entry once its counts are ``expected`` (a dead letter takes a moment)."""
    deadline = time.monotonic() + 20
    while True:
        body = await get(client, "/api/queues")
        entry = next(q for q in body["queues"] if q["name"] == QUEUE)
        if all(entry[k] == v for k, v in expected.items()) or time.monotonic() > deadline:
            return entry  # type: ignore[no-any-return]
        await asyncio.sleep(0.2)


async def test_every_endpoint_reports_the_known_workload(
    api: tuple[Running, TestClient[Any, Any]],
) -> None:
    running, client = api
    async with asyncio.timeout(TEST_TIMEOUT_S), known_workload(running.bootstrap) as work:
        await check_cluster(client)
        await check_topics(client)
        await check_group(client, work)
        await check_queue(client)
        await check_records(client)


async def check_cluster(client: TestClient[Any, Any]) -> None:
    cluster = await get(client, "/api/cluster")
    assert cluster["node_id"] == 0
    assert cluster["controller"] == 0
    assert [b["node_id"] for b in cluster["brokers"]] == [0]
    assert cluster["brokers"][0]["controller"] is True
    assert cluster["topics"] == 3  # orders, jobs, jobs-dlq
    assert cluster["under_replicated"] == []
    assert cluster["offline"] == []
    assert cluster["brokers"][0]["leaders"] == cluster["partitions"]


async def check_topics(client: TestClient[Any, Any]) -> None:
    listed = {t["name"]: t for t in (await get(client, "/api/topics"))["topics"]}
    assert listed[TOPIC]["partitions"] == 3
    assert listed[TOPIC]["queue"] is False
    assert listed[QUEUE]["queue"] is True
    assert listed[DLQ]["queue"] is True
    assert listed["__consumer_offsets"]["internal"] is True
    assert listed[TOPIC]["size_bytes_here"] > sum(COUNTS) * 40
    topic = await get(client, f"/api/topics/{TOPIC}")
    parts = topic["partitions"]
    assert [p["end_offset"] for p in parts] == list(COUNTS)
    assert [p["start_offset"] for p in parts] == [0, 0, 0]
    assert [(p["leader"], p["isr"], p["replicas"]) for p in parts] == [(0, [0], [0])] * 3
    assert all(p["size_bytes"] > 0 for p in parts)
    assert [p["consumed"] for p in parts] == list(COMMITTED)  # the group's committed offsets
    assert sum(p["size_bytes"] for p in parts) == listed[TOPIC]["size_bytes_here"]
    missing = await get(client, "/api/topics/nope", status=404)
    assert missing["error"] == "UnknownTopicOrPartitionError"


async def check_group(client: TestClient[Any, Any], work: Workload) -> None:
    groups = (await get(client, "/api/groups"))["groups"]
    assert {"group_id": GROUP, "state": "Stable", "members": 1, "lag": sum(work.lag())} in groups
    group = await get(client, f"/api/groups/{GROUP}")
    assert group["state"] == "Stable"
    (member,) = group["members"]
    assert member["assignment"] == {TOPIC: [0, 1, 2]}
    by_partition = {o["partition"]: o for o in group["offsets"] if o["topic"] == TOPIC}
    assert [by_partition[p]["committed_offset"] for p in range(3)] == list(COMMITTED)
    assert [by_partition[p]["end_offset"] for p in range(3)] == list(COUNTS)
    assert [by_partition[p]["lag"] for p in range(3)] == work.lag()
    assert all(by_partition[p]["member_id"] == member["member_id"] for p in range(3))
    assert group["lag"] == sum(work.lag())
    missing = await get(client, "/api/groups/nobody", status=404)
    assert missing["error"] == "GroupIdNotFoundError"


async def check_queue(client: TestClient[Any, Any]) -> None:
    expected = {"visible": 4, "in_flight": 1, "delayed": 1, "acked": 1, "dead_lettered": 1}
    entry = await settled_queue(client, **expected)
    assert {k: entry[k] for k in expected} == expected
    assert entry["dead_letter_queue"] == DLQ
    assert entry["visibility_timeout_ms"] == 600_000
    assert entry["errors"] == []
    assert entry["offline_partitions"] == 0
    assert entry["oldest_age_s"] is not None
    assert 0 <= entry["oldest_age_s"] < TEST_TIMEOUT_S
    body = await get(client, "/api/queues")  # the dead-letter queue is a queue too
    dead = next(q for q in body["queues"] if q["name"] == DLQ)
    assert dead["visible"] == 1


async def check_records(client: TestClient[Any, Any]) -> None:
    path = f"/api/topics/{TOPIC}/partitions/2/records"
    body = await get(client, f"{path}?limit=5")
    assert body["end_offset"] == COUNTS[2]
    assert body["complete"] is True
    assert [r["offset"] for r in body["records"]] == list(range(25, 30))
    last = body["records"][-1]
    assert base64.b64decode(last["value"]) == order_value(2, 29)
    assert json.loads(base64.b64decode(last["value"]))["order"] == 29
    assert base64.b64decode(last["key"]) == b"order-29"
    assert [[k, base64.b64decode(v)] for k, v in last["headers"]] == [["source", b"test"]]
    assert last["value_size"] == len(order_value(2, 29))
    everything = await get(client, f"{path}?limit={browse.MAX_RECORDS}")
    assert [r["offset"] for r in everything["records"]] == list(range(30))
    for bad in ("0", str(browse.MAX_RECORDS + 1), "many"):
        refused = await get(client, f"{path}?limit={bad}", status=400)
        assert refused["error"] == "InvalidRequestError"
    await get(client, f"/api/topics/{TOPIC}/partitions/7/records", status=404)
    await get(client, f"/api/topics/{TOPIC}/partitions/-1/records", status=404)
    await get(client, f"/api/topics/{TOPIC}/partitions/x/records", status=400)


async def test_console_pages_are_served_from_the_package_only(tmp_path: Path) -> None:
    """The pages, their modules and styles come from ``mq/http/console``, nothing else,
    under a Content-Security-Policy of 'self'; nothing outside the folder is served."""
    async with running_broker(tmp_path / "data") as running:
        app = web.Application()
        console_routes.add_routes(app, running.broker)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            index = await client.get("/")
            assert index.status == 200
            assert "default-src 'self'" in index.headers["Content-Security-Policy"]
            html = await index.text()
            assets = re.findall(r'(?:src|href)="(/console/[^"]+)"', html)
            assert sorted(assets) == ["/console/app.js", "/console/style.css"]
            for name in sorted(p.name for p in console_routes.STATIC_DIR.iterdir()):
                served = await client.get(f"/console/{name}")
                assert served.status == 200, name
                assert served.headers["X-Content-Type-Options"] == "nosniff"
                if name.endswith(".js"):
                    assert "javascript" in served.content_type
                text = (await served.text()).replace(SVG_NAMESPACE, "")  # a name, not a load
                assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text), name
            outside = await client.get("/console/../admin_api.py")
            assert outside.status in (403, 404)


async def test_browsing_large_records_shows_the_newest_within_the_bounds(
    api: tuple[Running, TestClient[Any, Any]],
) -> None:
    """Records of 700 KiB: 8 of them exceed the 4 MiB read bound, so fewer are shown, but
    the newest; each value is cut to 64 KiB and says its full size."""
    running, client = api
    size = 700 * 1024
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Producer(running.bootstrap) as producer:
            for i in range(8):
                await (await producer.send("large", bytes([65 + i]) * size, partition=0))
        body = await get(client, "/api/topics/large/partitions/0/records?limit=8")
    offsets = [r["offset"] for r in body["records"]]
    assert offsets[-1] == 7
    assert offsets == list(range(8 - len(offsets), 8))
    assert 0 < len(offsets) < 8  # 8 x 700 KiB is past browse.MAX_FETCH_BYTES
    assert body["complete"] is True
    for record in body["records"]:
        value = base64.b64decode(record["value"])
        assert value == bytes([65 + record["offset"]]) * browse.MAX_FIELD_BYTES
        assert record["value_size"] == size


async def test_many_consoles_polling_cost_one_computation(
    api: tuple[Running, TestClient[Any, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = api
    computed = 0
    real = admin_data.groups

    async def counted(broker: Any) -> dict[str, Any]:
        nonlocal computed
        computed += 1
        return await real(broker)

    monkeypatch.setattr(admin_data, "groups", counted)
    answers = await asyncio.gather(*(get(client, "/api/groups") for _ in range(20)))
    assert computed == 1
    assert all(a == answers[0] for a in answers)
    await asyncio.sleep(SHARE_S + 0.1)
    await get(client, "/api/groups")
    assert computed == 2
    await get(client, "/api/groups?cache-buster=1")
    await get(client, "/api/groups?cache-buster=2")
    assert computed == 2  # other query parameters do not defeat the sharing

"""The console's overview of a 3-broker cluster losing a broker, in a real browser.

Three ``mq serve --http-port 0`` processes and their etcd; a topic with 3 replicas
and one with a single replica on each broker. The page is opened on broker 1 and
left open while broker 3 is killed: without a reload, it shows broker 3 gone, the
partitions it held alone offline, and those it shared under-replicated.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from browser_helpers import chromium, screenshot, watched_page
from playwright.async_api import Browser, expect

from mq import Admin
from mq.local_cluster import LocalCluster

TEST_TIMEOUT_S = 180
CLUSTER_SETTINGS: dict[str, int | str] = {
    "session_timeout_ms": 2_000,
    "replica_lag_time_max_ms": 3_000,
    "replica_fetch_wait_max_ms": 200,
}
"""Short timeouts: a killed broker is noticed in seconds (as in tests/cluster)."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    made = LocalCluster(tmp_path / "cluster", 3, settings=CLUSTER_SETTINGS, http=True)
    await asyncio.to_thread(made.start)
    try:
        yield made
    finally:
        await asyncio.to_thread(made.stop)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as found:
        yield found


async def test_overview_shows_a_lost_broker_live(browser: Browser, cluster: LocalCluster) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S), watched_page(browser) as (page, watch):
        async with Admin(bootstrap=cluster.bootstrap) as admin:
            await admin.create_topic("payments", partitions=3, replication_factor=3)
            await admin.create_topic("scratch", partitions=3, replication_factor=1)
            scratch = await admin.describe_topic("scratch")
        alone = sorted(p.partition for p in scratch.partitions if p.replicas == (3,))
        assert alone  # one replica per broker: broker 3 holds some partitions alone
        await page.goto(f"{cluster.broker(1).http_url}/#/")
        await expect(page.locator("#brokers tbody tr")).to_have_count(3)
        await expect(page.locator(".card[data-label=offline] .card-value")).to_have_text("0")

        await asyncio.to_thread(cluster.kill, 3)
        await expect(page.locator("#brokers tbody tr")).to_have_count(2)
        offline = page.locator(".card[data-label=offline] .card-value")
        await expect(offline).to_have_text(str(len(alone)))
        problems = page.locator("#problems tbody tr")
        for index in alone:
            row = problems.filter(has_text=f"scratch-{index}")
            await expect(row).to_contain_text("offline")
        under = page.locator(".card[data-label=under-replicated] .card-value")
        await expect(under).not_to_have_text("0")  # payments' ISR shrinks without broker 3
        await expect(problems.filter(has_text="payments-0")).to_contain_text("under-replicated")
        await expect(page.locator("#status")).to_have_class(re.compile(r"\bok\b"))
        await screenshot(page, "overview-cluster")
        assert not watch.problems

"""The web console in a real headless browser (Debian's chromium through Playwright).

A real broker with its HTTP listener and the known workload of
:mod:`console_workload`: each page shows the live cluster's data; the group's lag
chart follows a consumer that catches up, without a reload; the message browser
shows a record produced while it is open, as UTF-8, JSON and hex. A JavaScript
error or a failed request on any page fails the test (:class:`PageWatch`).
Screenshots are saved under ``test-artifacts/console/`` (paths printed).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import pytest
from browser_helpers import PageWatch, chromium, screenshot, watched_page
from console_server import ConsoleServer, console_server
from console_workload import COMMITTED, COUNTS, DLQ, GROUP, QUEUE, TOPIC, Workload, known_workload
from playwright.async_api import Browser, Page, Route, expect

from mq import Admin, Producer, TopicPartition

TEST_TIMEOUT_S = 180


@pytest.fixture
async def live(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[ConsoleServer, Workload]]:
    async with (
        console_server(tmp_path_factory.mktemp("console")) as server,
        known_workload(server.bootstrap) as work,
    ):
        yield server, work


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as found:
        yield found


async def open_view(page: Page, server: ConsoleServer, route: str) -> None:
    await page.goto(f"{server.url}/#/{route}")
    await expect(page.locator("#status")).to_have_class(re.compile(r"\bok\b"))


async def column(page: Page, table: str, index: int) -> list[str]:
    return await page.locator(f"#{table} tbody tr td:nth-child({index})").all_inner_texts()


async def test_every_page_renders_the_live_cluster(
    browser: Browser, live: tuple[ConsoleServer, Workload]
) -> None:
    server, _ = live
    async with asyncio.timeout(TEST_TIMEOUT_S), watched_page(browser) as (page, _watch):
        await open_view(page, server, "")
        await expect(page.locator("#brokers tbody tr")).to_have_count(1)
        await expect(page.locator("#brokers")).to_contain_text("controller")
        await expect(page.locator(".card[data-label=topics] .card-value")).to_have_text("3")
        await expect(page.locator(".card[data-label=offline] .card-value")).to_have_text("0")
        await expect(page.locator("#problems")).to_contain_text("full ISR")
        await screenshot(page, "overview")

        await open_view(page, server, "topics")
        row = page.locator("#topics tbody tr", has_text=TOPIC).first
        await expect(row).to_contain_text("3")
        await expect(page.locator("#topics")).to_contain_text(QUEUE)
        await screenshot(page, "topics")

        await open_view(page, server, f"topics/{TOPIC}")
        await expect(page.locator("#partitions tbody tr")).to_have_count(3)
        assert await column(page, "partitions", 6) == [str(n) for n in COUNTS]  # end offsets
        assert await column(page, "partitions", 2) == ["0", "0", "0"]  # leaders
        assert await page.locator("#partitions svg.spark").count() == 3
        await expect(page.locator("#rate-in svg")).to_be_visible()
        await expect(page.locator("#rate-out svg")).to_be_visible()

        await open_view(page, server, "groups")
        billing = page.locator("#groups tbody tr", has_text=GROUP)
        await expect(billing.locator("td").nth(2)).to_have_text("1")  # members
        await expect(billing.locator("td").nth(3)).to_have_text(str(sum(Workload.lag())))
        await page.click(f"#groups a:text('{GROUP}')")
        await expect(page.locator("#offsets tbody tr")).to_have_count(3)
        assert await column(page, "offsets", 2) == [str(c) for c in COMMITTED]
        assert await column(page, "offsets", 4) == [str(lag) for lag in Workload.lag()]
        await expect(page.locator("#members")).to_contain_text(f"{TOPIC}: 0, 1, 2")
        await screenshot(page, "group")

        await open_view(page, server, "queues")
        jobs = page.locator("#queues tbody tr", has=page.locator(f"a:text-is('{QUEUE}')"))
        await expect(jobs.locator("td").nth(1)).to_have_text("4")  # visible
        await expect(jobs.locator("td").nth(2)).to_have_text("1")  # in flight
        await expect(jobs.locator("td").nth(3)).to_have_text("1")  # delayed
        await expect(jobs.locator("td").nth(4)).to_have_text("1")  # dead-lettered
        await expect(jobs.locator("td").nth(6)).to_contain_text(" s")  # oldest message age
        await expect(jobs).to_contain_text(DLQ)
        await screenshot(page, "queues")


async def lag_shown(page: Page) -> dict[str, str]:
    """The lag chart's bars, label -> value text (read at once: the page redraws)."""
    shown: dict[str, str] = await page.eval_on_selector_all(
        "#lag-chart text.bar-value",
        "els => Object.fromEntries(els.map(e => [e.dataset.label, e.textContent]))",
    )
    return shown


async def test_lag_chart_follows_a_consumer_catching_up(
    browser: Browser, live: tuple[ConsoleServer, Workload]
) -> None:
    server, work = live
    async with asyncio.timeout(TEST_TIMEOUT_S), watched_page(browser) as (page, _watch):
        await open_view(page, server, f"groups/{GROUP}")
        total = page.locator(".card[data-label='total lag'] .card-value")
        await expect(total).to_have_text(str(sum(Workload.lag())))
        assert (await lag_shown(page))[f"{TOPIC}-2"] == "30 records"
        committed = list(COMMITTED)
        steps = ((2, 10), (2, 20), (0, 10), (2, 30))
        for step, (partition, offset) in enumerate(steps):
            committed[partition] = offset
            await work.consumer.commit({TopicPartition(TOPIC, partition): offset})
            lag = [n - c for n, c in zip(COUNTS, committed, strict=True)]
            await expect(total).to_have_text(f"{sum(lag):,}")  # no reload: the page polls
            shown = await lag_shown(page)
            assert shown == {f"{TOPIC}-{p}": f"{lag[p]:,} records" for p in range(3)}
            if step == 1:  # half way: the trend has a few points, the bars still differ
                await screenshot(page, "group-lag-catching-up")
        await expect(page.locator("#lag-trend svg polyline")).to_have_count(1)
        await screenshot(page, "group-caught-up")


async def test_topic_rates_are_live_charts(
    browser: Browser, live: tuple[ConsoleServer, Workload]
) -> None:
    """Records produced and committed while the topic page is open move its charts."""
    server, work = live
    async with asyncio.timeout(TEST_TIMEOUT_S), watched_page(browser) as (page, _watch):
        await open_view(page, server, f"topics/{TOPIC}")
        await expect(page.locator("#rate-in .spark-text")).to_have_text("0.0/s")
        stop = asyncio.Event()

        async def traffic() -> None:
            async with Producer(server.bootstrap) as producer:
                i = 0
                while not stop.is_set():
                    for p in range(len(COUNTS)):
                        await producer.send(TOPIC, b'{"tick": %d}' % i, partition=p)
                    await producer.flush()
                    committed = min(COUNTS[2], 2 + i // 4)
                    await work.consumer.commit({TopicPartition(TOPIC, 2): committed})
                    i += 1
                    await asyncio.sleep(0.1)

        task = asyncio.create_task(traffic())
        try:
            moving = re.compile(r"^(?!0\.0/s$).+/s$")
            await expect(page.locator("#rate-in .spark-text")).to_have_text(moving)
            await expect(page.locator("#rate-out .spark-text")).to_have_text(moving)
            await expect(page.locator("#rate-bytes .spark-text")).to_have_text(moving)
            await expect(page.locator("#rate-in polyline")).to_have_count(1)
            await page.wait_for_timeout(6_000)  # a few more polls: the charts get a shape
            await screenshot(page, "topic")
        finally:
            stop.set()
            await task
        ends = [int(t) for t in await column(page, "partitions", 6)]
        assert all(end > n for end, n in zip(ends, COUNTS, strict=True))


async def test_message_browser_shows_a_record_just_produced(
    browser: Browser, live: tuple[ConsoleServer, Workload]
) -> None:
    server, _ = live
    async with asyncio.timeout(TEST_TIMEOUT_S), watched_page(browser) as (page, _watch):
        await open_view(page, server, f"browse/{TOPIC}/1")
        first_offset = page.locator("#records tbody tr td:nth-child(1)").first
        await expect(first_offset).to_have_text(str(COUNTS[1] - 1))
        value = {"hello": "console", "n": 42}
        async with Producer(server.bootstrap) as producer:
            sent = await producer.send(
                TOPIC,
                json.dumps(value).encode(),
                key=b"fresh",
                headers=[("kind", b"demo")],
                partition=1,
            )
            await sent
        await expect(first_offset).to_have_text(str(COUNTS[1]))  # newest first, no reload
        newest = page.locator("#records tbody tr").first
        await expect(newest).to_contain_text('{"hello": "console", "n": 42}')
        await expect(newest).to_contain_text("kind=demo")
        await page.check("input[name=mode][value=json]")
        await expect(newest.locator("pre.value")).to_have_text(json.dumps(value, indent=2))
        await screenshot(page, "messages-json", full_page=False)
        await page.check("input[name=mode][value=hex]")
        await expect(newest.locator("pre.value")).to_contain_text("7b 22 68 65 6c 6c 6f 22")
        await page.check("input[name=mode][value=utf8]")
        async with Producer(server.bootstrap) as producer:  # bytes that are not UTF-8
            await (await producer.send(TOPIC, b"\xff\x00mq", partition=1))
        await expect(first_offset).to_have_text(str(COUNTS[1] + 1))
        await expect(newest).to_contain_text("not UTF-8: shown as hex")
        await expect(newest.locator("pre.value")).to_contain_text("ff 00 6d 71")
        await page.select_option("#browse-partition", "2")
        await expect(first_offset).to_have_text(str(COUNTS[2] - 1))


async def test_a_javascript_error_fails_the_page_check(browser: Browser) -> None:
    """The watch is live: an uncaught error and a failed request are both reported."""
    context = await browser.new_context()
    try:
        page = await context.new_page()
        watch = PageWatch(page)
        await page.set_content("<script>setTimeout(() => { throw new Error('boom'); })</script>")
        await page.evaluate("fetch('http://127.0.0.1:9/nothing').catch(() => {})")
        await page.wait_for_timeout(500)
        with pytest.raises(AssertionError, match="boom"):
            watch.check()
        assert any("request failed" in p for p in watch.problems)
    finally:
        await context.close()


async def test_a_slow_answer_of_the_page_left_never_covers_the_next(
    browser: Browser, live: tuple[ConsoleServer, Workload]
) -> None:
    server, _ = live
    async with asyncio.timeout(TEST_TIMEOUT_S), watched_page(browser) as (page, _watch):
        released = asyncio.Event()

        async def slow(route: Route) -> None:
            await released.wait()
            await route.continue_()

        await page.route(re.compile(r"/api/topics$"), slow)
        await page.goto(f"{server.url}/#/topics")
        await page.wait_for_timeout(300)  # the topics poll is waiting on its answer
        await page.evaluate("location.hash = '#/groups'")  # no reload: the same page
        await expect(page.locator("#groups")).to_contain_text(GROUP)
        released.set()  # the topics answer arrives after the groups page is shown
        await page.wait_for_timeout(500)  # (the groups page polls again only after 2 s)
        assert await page.locator("main h1").all_inner_texts() == ["Consumer groups"]
        assert await page.locator("#topics").count() == 0


async def test_a_wide_group_charts_its_partitions_with_the_most_lag(
    browser: Browser, live: tuple[ConsoleServer, Workload]
) -> None:
    server, _ = live
    wide = 45
    async with asyncio.timeout(TEST_TIMEOUT_S), watched_page(browser) as (page, _watch):
        async with Admin(bootstrap=server.bootstrap) as admin:
            await admin.create_topic("wide", partitions=wide)
            async with Producer(server.bootstrap) as producer:
                sent = [
                    await producer.send("wide", b"x", partition=p)
                    for p in range(wide)
                    for _ in range(p)
                ]
                await asyncio.gather(*sent)
            await admin.reset_offsets("wide-readers", "wide", "earliest")  # lag p in p
        await open_view(page, server, "groups/wide-readers")
        caption = page.locator("#lag-chart figcaption")
        await expect(caption).to_have_text(f"the 40 partitions with the most lag of {wide}")
        shown = await lag_shown(page)
        assert shown == {f"wide-{p}": f"{p} records" for p in range(wide - 40, wide)}
        await expect(page.locator("#offsets tbody tr")).to_have_count(wide)

"""Debian's chromium driven by Playwright, for the console's browser tests.

The browser is the system's ``/usr/bin/chromium`` (``apt-get install -y chromium``;
``.ci/run`` installs it); Playwright's own browser downloads are never used. Tests
skip, saying so, when it is absent. :class:`PageWatch` collects what must fail a
test: a JavaScript error (an uncaught exception or a ``console.error``) and a failed
request (or an HTTP error status). Screenshots go to ``test-artifacts/console/``
(gitignored; ``MQ_TEST_ARTIFACTS`` moves the root), and their paths are printed.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import (
    Browser,
    ConsoleMessage,
    Page,
    Request,
    Response,
    async_playwright,
    expect,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 20_000
"""Longest wait for anything on a page (the console polls every 2 s; the machine is shared)."""
ARTIFACTS = Path(os.environ.get("MQ_TEST_ARTIFACTS", "test-artifacts")) / "console"


expect.set_options(timeout=TIMEOUT_MS)


def require_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium (the console's tests)")


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    require_chromium()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()


class PageWatch:
    """Every JavaScript error and failed request of a page, as text."""

    def __init__(self, page: Page) -> None:
        self.problems: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("requestfailed", self._failed)
        page.on("response", self._response)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.problems.append(f"console error: {message.text} at {message.location}")

    def _failed(self, request: Request) -> None:
        self.problems.append(f"request failed: {request.method} {request.url}: {request.failure}")

    def _response(self, response: Response) -> None:
        if response.status >= 400:
            self.problems.append(f"HTTP {response.status}: {response.url}")

    def check(self) -> None:
        assert not self.problems, "\n".join(self.problems)


@asynccontextmanager
async def watched_page(browser: Browser) -> AsyncIterator[tuple[Page, PageWatch]]:
    """A new page whose errors fail the test when the block ends."""
    context = await browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    watch = PageWatch(page)
    try:
        yield page, watch
        watch.check()
    finally:
        await context.close()


async def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = (ARTIFACTS / f"{name}.png").resolve()
    await page.screenshot(path=str(path), full_page=full_page)
    print(f"screenshot: {path}")
    return path

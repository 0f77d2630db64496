"""The web console of a secured broker (issues 19 and 21) in a real headless browser.

A real ``mq serve --http-port 0`` with ``authorizer = "acl"``; its first user and ACL
are made offline with the CLI (``mq user add --data-dir``, ``mq acl add --data-dir``),
as an operator bootstraps a secured broker. Without credentials the console is a 401;
with the user's (the browser's Basic credentials) it works, and a view the ACLs refuse
(the overview needs DESCRIBE on the cluster) says so in the status line, with no
JavaScript error.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from browser_helpers import VIEWPORT, chromium, screenshot
from playwright.async_api import Browser, expect

TEST_TIMEOUT_S = 180
COMMAND_TIMEOUT_S = 120
USER, PASSWORD = "alice", "alice-console-secret"


def mq_cli(*args: str, stdin: str | None = None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mq_cli.main", *args],
        input=stdin.encode() if stdin is not None else None,
        capture_output=True,
        env={**os.environ, "MQ_BOOTSTRAP": ""},
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    data = tmp_path / "data"
    mq_cli("user", "add", USER, "--password-stdin", "--data-dir", str(data), stdin=PASSWORD + "\n")
    mq_cli(
        "acl",
        "add",
        "--data-dir",
        str(data),
        "--principal",
        f"User:{USER}",
        "--operation",
        "describe",
        "--topic",
        "orders",
    )
    process = BrokerProcess(
        data, settings={"authorizer": "acl"}, segment_bytes=16 << 20, http_port=0
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as found:
        yield found


async def test_the_console_asks_who_you_are_and_shows_refusals(
    browser: Browser, secured: BrokerProcess
) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        anonymous = await browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
        try:
            # (a navigation is aborted by a headless browser with no one to ask)
            response = await anonymous.request.get(f"{secured.http_url}/")
            assert response.status == 401
            assert response.headers["www-authenticate"].startswith("Basic")
        finally:
            await anonymous.close()

        context = await browser.new_context(
            viewport=VIEWPORT,  # type: ignore[arg-type]
            http_credentials={"username": USER, "password": PASSWORD},
        )
        try:
            page = await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            status = page.locator("#status")
            await page.goto(f"{secured.http_url}/#/topics")
            await expect(status).to_have_class(re.compile(r"\bok\b"))
            await page.goto(f"{secured.http_url}/#/")
            await expect(status).to_have_class(re.compile(r"\bbad\b"))
            await expect(status).to_contain_text(
                f"not allowed: User:{USER} is not authorized to DESCRIBE the cluster"
            )
            await screenshot(page, "secured-overview-refused", full_page=False)
            assert not errors, errors
        finally:
            await context.close()

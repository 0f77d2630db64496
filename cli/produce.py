"""``mq produce TOPIC``: one message per input line, acknowledged before exit."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Literal

import click

import mq

from .common import bootstrap_option, parse_pairs, run, security


@click.command()
@click.argument("topic")
@click.option(
    "-f", "--file", "path", type=click.Path(exists=True, dir_okay=False), help="Read this file."
)
@click.option("-k", "--key-separator", help="Split each line into KEY<sep>VALUE.")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="all", show_default=True)
@click.option(
    "-H", "--header", "headers", multiple=True, help="A header KEY=VALUE on every message."
)
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Send to this partition only.")
@bootstrap_option
def produce(
    topic: str,
    path: str | None,
    key_separator: str | None,
    acks: str,
    headers: tuple[str, ...],
    partition: int | None,
    bootstrap: str,
) -> None:
    """Send one message per line of stdin (or --file) to TOPIC.

    Exits 0 only when every message was acknowledged; a summary goes to stderr.
    """
    header_list = [(k, v.encode()) for k, v in parse_pairs(headers, "--header").items()]
    separator = key_separator.encode() if key_separator else None
    ack_level: Literal[0, 1, "all"] = "all" if acks == "all" else (0 if acks == "0" else 1)

    async def main() -> tuple[int, int, float]:
        started = time.monotonic()
        futures = []
        fd = sys.stdin.fileno() if path is None else os.open(path, os.O_RDONLY)
        progress = (
            click.progressbar(length=os.fstat(fd).st_size, label="producing", file=sys.stderr)
            if path is not None
            else None
        )
        try:
            async with mq.Producer(
                bootstrap=bootstrap, acks=ack_level, linger_ms=5, **security()
            ) as producer:
                async for lines in _read_lines(fd, progress.update if progress else None):
                    for line in lines:
                        key, value = _split(line, separator)
                        futures.append(
                            await producer.send(topic, value, key, header_list, partition)
                        )
                await producer.flush()
        finally:
            if path is not None:
                os.close(fd)
            if progress is not None:
                progress.render_finish()
        failed = [f.exception() for f in futures if f.exception() is not None]
        if failed:
            click.echo(f"first failure: {failed[0]}", err=True)
        return len(futures), len(failed), time.monotonic() - started

    sent, failed, seconds = run(main)
    rate = sent / seconds if seconds else 0.0
    click.echo(
        f"{sent - failed} of {sent} messages acknowledged in {seconds:.2f} s ({rate:,.0f} msg/s)",
        err=True,
    )
    if failed:
        sys.exit(1)


READ_BYTES = 1 << 20
"""Input read per thread hop: whatever is available, up to this much."""


async def _read_lines(
    fd: int, on_bytes: Callable[[int], None] | None
) -> AsyncIterator[list[bytes]]:
    """Complete lines as they become available (a worker thread waits on the input,
    so an interactive terminal's line is sent at once and the producer keeps running)."""
    loop = asyncio.get_running_loop()
    tail = b""
    while data := await loop.run_in_executor(None, os.read, fd, READ_BYTES):
        if on_bytes is not None:
            on_bytes(len(data))
        lines = (tail + data).split(b"\n")
        tail = lines.pop()
        yield lines
    if tail:
        yield [tail]


def _split(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    if separator is not None and separator in line:
        key, _, value = line.partition(separator)
        return key, value
    return None, line

"""``mq consume TOPIC``: print messages, as text (one value per line) or JSON lines."""

from __future__ import annotations

import base64
import json
import sys
import time
from typing import Any, Literal

import click

import mq

from .common import bootstrap_option, run, security

POLL_MS = 500
"""Longest wait of one poll, so --timeout and Ctrl-C are noticed promptly."""


@click.command()
@click.argument("topic")
@click.option("-g", "--group", help="Consume as a member of this consumer group.")
@click.option(
    "--from-beginning", is_flag=True, help="Start at the earliest offset (no commit yet)."
)
@click.option("-n", "--max-messages", type=click.IntRange(min=1), help="Stop after N messages.")
@click.option(
    "-t", "--timeout", type=click.FloatRange(min=0), help="Stop when no message came for SECONDS."
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@bootstrap_option
def consume(
    topic: str,
    group: str | None,
    from_beginning: bool,
    max_messages: int | None,
    timeout: float | None,
    fmt: str,
    bootstrap: str,
) -> None:
    """Print messages of TOPIC until --max-messages, --timeout or Ctrl-C.

    Exits non-zero with the error when a partition cannot be read (corrupt data
    included), and when --timeout ends the wait while a partition is still
    below its high watermark: that is a stall, not the end of the data.
    """
    out = sys.stdout.buffer
    count = 0

    async def main() -> int:
        nonlocal count
        reset: Literal["earliest", "latest"] = "earliest" if from_beginning else "latest"
        async with mq.Consumer(
            topic, bootstrap=bootstrap, group_id=group, auto_offset_reset=reset, **security()
        ) as consumer:
            idle_since = time.monotonic()
            while max_messages is None or count < max_messages:
                wanted = None if max_messages is None else max_messages - count
                batches = await consumer.getmany(timeout_ms=POLL_MS, max_records=wanted)
                records = [r for tp in sorted(batches) for r in batches[tp]]
                for record in records:
                    out.write(_format(record, fmt))
                count += len(records)
                out.flush()
                if records:
                    idle_since = time.monotonic()
                elif timeout is not None and time.monotonic() - idle_since >= timeout:
                    await _check_not_stalled(consumer, timeout)
                    break
            if group is not None:
                await consumer.commit()
        return count

    try:
        run(main)
    except click.ClickException:
        if count:  # what was printed before the error
            click.echo(f"{count} messages", err=True)
        raise
    click.echo(f"{count} messages", err=True)


async def _check_not_stalled(consumer: mq.Consumer, idle_s: float) -> None:
    """Raise if a partition got nothing for ``idle_s`` although data lies ahead of it."""
    behind = []
    for tp in sorted(consumer.assignment()):
        position, high = await consumer.position(tp), consumer.highwater(tp)
        if 0 <= position < high:
            behind.append(f"{tp} at offset {position} (high watermark {high})")
    if behind:
        raise click.ClickException(
            f"no message for {idle_s:g} s although there is more to read: " + ", ".join(behind)
        )


def _text(data: bytes | None) -> str | None:
    """UTF-8 text when it is; otherwise base64, marked as such."""
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def _format(record: mq.ConsumerRecord, fmt: str) -> bytes:
    if fmt == "text":
        return (record.value or b"") + b"\n"
    body: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _text(record.key),
        "value": _text(record.value),
        "headers": [[k, _text(v)] for k, v in record.headers],
    }
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"

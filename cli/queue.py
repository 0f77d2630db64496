"""Queues from the command line: ``mq queue`` (create, list, describe, purge, delete,
redrive) and the message commands ``mq send``, ``mq receive``, ``mq ack`` and ``mq nack``.

Each command opens one :class:`mq.QueueClient`. Commands naming a queue first
describe it, so a missing queue is a prompt one-line error (and ``mq send`` does
not auto-create a plain topic by a typo). Times are in seconds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import sys
import time
from typing import Any

import click

import mq

from .common import bootstrap_option, echo_table, parse_pairs, run, security
from .produce import _read_lines

SECONDS = click.FloatRange(min=0)
group_option = click.option(
    "-g", "--group", help="The share group reading the queue [the queue's own name]."
)
format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
yes_option = click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")


async def _require(
    client: mq.QueueClient, name: str, group: str | None = None
) -> mq.QueueAttributes:
    """The queue's attributes; a clear error at once if it does not exist."""
    try:
        return await client.describe_queue(name, group=group)
    except mq.MQError as exc:
        if exc.name == "UNKNOWN_TOPIC_OR_PARTITION":
            raise click.ClickException(f"queue {name!r} does not exist") from exc
        raise


@click.group()
def queue() -> None:
    """Manage queues: topics read by share groups, with leases and dead letters."""


@queue.command()
@click.argument("name")
@click.option("-p", "--partitions", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--visibility-timeout", type=SECONDS, default=30, show_default=True, help="Lease seconds."
)
@click.option(
    "--max-deliveries", type=click.IntRange(min=1), default=10, help="Before dead-lettering [10]."
)
@click.option("--dead-letter-queue", help="Where failed messages go (created if missing).")
@click.option("--delay", type=SECONDS, default=0, show_default=True, help="Default send delay.")
@click.option("--fifo", is_flag=True, help="In order per key: one in flight per key at a time.")
@click.option(
    "--receive-rate",
    type=click.IntRange(min=0),
    default=0,
    help="Messages/s a share group may receive per partition [no limit].",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(min=0),
    default=0,
    help="Leased messages a share group may hold per partition [the broker's bound].",
)
@click.option("-r", "--replication-factor", type=click.IntRange(min=1), help="Replicas.")
@click.option(
    "--if-not-exists", is_flag=True, help="Succeed if it exists (its settings unchanged)."
)
@bootstrap_option
def create(
    name: str,
    partitions: int,
    replication_factor: int | None,
    if_not_exists: bool,
    bootstrap: str,
    **settings: Any,
) -> None:
    """Create queue NAME (and its dead-letter queue).

    The dead-letter queue gets the same settings (without delay or a dead-letter
    queue of its own). With --if-not-exists an existing topic NAME is no error,
    as with Kafka's tools: it is left as it is, whatever its settings.
    """

    async def main() -> bool:
        async with mq.QueueClient(bootstrap=bootstrap, **security()) as client:
            rf = replication_factor or -1
            return await client.create_queue(
                name, partitions, replication_factor=rf, exist_ok=if_not_exists, **settings
            )

    if not run(main):
        click.echo(f"queue {name} already exists")
        return
    dlq = settings["dead_letter_queue"]
    dead = f" (dead letters to {dlq})" if dlq else ""
    click.echo(f"created queue {name}{dead}")


@queue.command(name="list")
@bootstrap_option
def list_(bootstrap: str) -> None:
    """List queues."""

    async def main() -> list[str]:
        async with mq.QueueClient(bootstrap=bootstrap, **security()) as client:
            return await client.list_queues()

    for name in run(main):
        click.echo(name)


@queue.command()
@click.argument("name")
@group_option
@format_option
@bootstrap_option
def describe(name: str, group: str | None, fmt: str, bootstrap: str) -> None:
    """Message counts and settings of queue NAME."""

    async def main() -> mq.QueueAttributes:
        async with mq.QueueClient(bootstrap=bootstrap, **security()) as client:
            return await _require(client, name, group)

    attrs = dataclasses.asdict(run(main))
    if fmt == "json":
        click.echo(json.dumps(attrs, sort_keys=True))
        return
    head = {key: attrs.pop(key) for key in ("name", "group", "partitions")}
    click.echo("queue {name}  group {group}  partitions {partitions}".format(**head))
    configs = attrs.pop("configs")
    age = attrs.pop("oldest_visible_age_s")
    rows = [[key, value] for key, value in attrs.items()]  # the message counts
    rows.append(["oldest_visible_age_s", "-" if age is None else f"{age:.3f}"])
    echo_table(rows, ["ATTRIBUTE", "VALUE"])
    click.echo("settings:")
    for key, value in sorted(configs.items()):
        click.echo(f"  {key}={value}")


@queue.command()
@click.argument("name")
@yes_option
@bootstrap_option
def purge(name: str, yes: bool, bootstrap: str) -> None:
    """Delete every message of queue NAME, those in flight too."""
    if not yes:
        click.confirm(f"Delete every message of queue {name}?", abort=True)

    async def main() -> None:
        async with mq.QueueClient(bootstrap=bootstrap, **security()) as client:
            await _require(client, name)
            await client.purge_queue(name)

    run(main)
    click.echo(f"purged queue {name}")


@queue.command()
@click.argument("name")
@yes_option
@bootstrap_option
def delete(name: str, yes: bool, bootstrap: str) -> None:
    """Delete queue NAME and all its messages."""
    if not yes:
        click.confirm(f"Delete queue {name} and all its messages?", abort=True)

    async def main() -> None:
        async with mq.QueueClient(bootstrap=bootstrap, **security()) as client:
            await client.delete_queue(name)

    run(main)
    click.echo(f"deleted queue {name}")


@queue.command()
@click.argument("dead_letter_queue")
@bootstrap_option
def redrive(dead_letter_queue: str, bootstrap: str) -> None:
    """Move the messages of DEAD_LETTER_QUEUE back to the queues they came from."""

    async def main() -> int:
        async with mq.QueueClient(bootstrap=bootstrap, **security()) as client:
            await _require(client, dead_letter_queue)
            return await client.redrive(dead_letter_queue)

    moved = run(main)
    click.echo(f"moved {moved} messages from {dead_letter_queue}")


@click.command()
@click.argument("queue")
@click.option(
    "--delay", type=SECONDS, default=None, help="Invisible for SECONDS (default: the queue's)."
)
@click.option("-k", "--key", help="The key of every message (FIFO order is per key).")
@click.option("-H", "--header", "headers", multiple=True, help="A header KEY=VALUE (repeatable).")
@click.option("--dedup-id", help="Drop if sent in the last 5 minutes (every line has it).")
@bootstrap_option
def send(
    queue: str, key: str | None, headers: tuple[str, ...], bootstrap: str, **options: Any
) -> None:
    """Send one message per line of stdin to QUEUE (all lines at once).

    Exits 0 only when every message was acknowledged; a summary goes to stderr.
    """
    header_map = parse_pairs(headers, "--header")
    key_bytes = key.encode() if key is not None else None

    async def main() -> tuple[int, int, float]:
        started = time.monotonic()
        futures = []
        async with mq.QueueClient(bootstrap=bootstrap, **security()) as client:
            await _require(client, queue)
            async for lines in _read_lines(sys.stdin.fileno(), None):
                for line in lines:
                    sending = client.send_nowait(
                        queue, line, key=key_bytes, headers=header_map, **options
                    )
                    futures.append(await sending)
            results = await asyncio.gather(*futures, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            click.echo(f"first failure: {failed[0]}", err=True)
        return len(results), len(failed), time.monotonic() - started

    sent, failed, seconds = run(main)
    click.echo(f"{sent - failed} of {sent} messages sent to {queue} in {seconds:.2f} s", err=True)
    if failed:
        sys.exit(1)


@click.command()
@click.argument("queue")
@click.option("-n", "--max-messages", type=click.IntRange(min=1), default=10, help="At most [10].")
@click.option(
    "-w", "--wait", type=click.FloatRange(0, 20), default=20, help="For a first message [20 s]."
)
@click.option("--visibility-timeout", type=SECONDS, help="Lease seconds [the queue's].")
@click.option(
    "--ack/--no-ack", default=True, help="Ack once printed [ack]; or ack/nack receipts later."
)
@group_option
@click.option("-f", "--filter", "filters", multiple=True, help="Only with header KEY=VALUE.")
@format_option
@bootstrap_option
def receive(
    queue: str,
    wait: float,
    ack: bool,
    group: str | None,
    filters: tuple[str, ...],
    fmt: str,
    bootstrap: str,
    **options: Any,
) -> None:
    """Receive up to --max-messages messages from QUEUE and print them.

    text: RECEIPT<TAB>BODY per message; json: one object per line, with body (or
    body_base64 if not UTF-8), key, headers, receipt, delivery_count, partition
    and offset. Several --filter values of one header match any of them.
    """
    wanted: dict[str, list[str]] = {}
    for item in filters:
        for name, value in parse_pairs((item,), "--filter").items():
            wanted.setdefault(name, []).append(value)
    out = sys.stdout.buffer

    async def main() -> int | None:
        async with mq.QueueClient(bootstrap=bootstrap, **security()) as client:
            await _require(client, queue, group)
            messages = await client.receive(queue, wait=wait, filter=wanted, group=group, **options)
            try:
                for message in messages:
                    out.write(_format(message, fmt))
                out.flush()
            except BrokenPipeError:  # the reader went away (| head): give them all back
                with contextlib.suppress(mq.MQError):
                    await client.nack(*messages)
                return None
            if ack and messages:
                await client.ack(*messages)
        return len(messages)

    count = run(main)
    if count is None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        click.echo("stdout was closed: released the messages without acking them", err=True)
        sys.exit(1)
    click.echo(f"{count} messages{' acked' if ack and count else ''}", err=True)


def _format(message: mq.QueueMessage, fmt: str) -> bytes:
    if fmt == "text":
        return message.receipt.encode() + b"\t" + (message.body or b"") + b"\n"
    out: dict[str, Any] = {
        "queue": message.queue,
        "receipt": message.receipt,
        "delivery_count": message.delivery_count,
        "partition": message.partition,
        "offset": message.offset,
        "timestamp": message.timestamp,
    }
    _put(out, out, "body", message.body)
    _put(out, out, "key", message.key)
    headers: dict[str, Any] = {}
    binary: dict[str, Any] = {}
    for name, value in message.headers:  # a repeated name: its last value
        _put(headers, binary, name, value)
    out["headers"] = headers
    if binary:
        out["headers_base64"] = binary
    return json.dumps(out, ensure_ascii=False).encode() + b"\n"


def _put(text: dict[str, Any], binary: dict[str, Any], name: str, data: bytes | None) -> None:
    """``text[name]``: the UTF-8 text (or None); else base64 in ``binary`` (with ``_base64``
    appended to the name if both are the same dict)."""
    if data is None:
        text[name] = None
        return
    try:
        text[name] = data.decode()
    except UnicodeDecodeError:
        binary[f"{name}_base64" if binary is text else name] = base64.b64encode(data).decode()


def _receipts(queue: str, texts: tuple[str, ...], group: str | None) -> list[mq.Receipt]:
    receipts = []
    for text in texts:
        try:
            receipt = mq.Receipt.parse(queue, text, group)
        except mq.MQError as exc:
            raise click.BadParameter(exc.message, param_hint="RECEIPT") from None
        if receipt.partition < 0 or receipt.offset < 0 or receipt.deliveries < 1:
            raise click.BadParameter(f"{text!r} is out of range", param_hint="RECEIPT")
        receipts.append(receipt)
    return receipts


async def _settle(
    bootstrap: str, queue: str, receipts: list[mq.Receipt], group: str | None, delay: float | None
) -> None:
    """Ack (``delay`` None) or nack the receipts."""
    async with mq.QueueClient(bootstrap=bootstrap, **security()) as client:
        attrs = await _require(client, queue, group)
        for receipt in receipts:
            if receipt.partition >= attrs.partitions:
                raise click.BadParameter(
                    f"{receipt}: {queue} has no partition {receipt.partition}",
                    param_hint="RECEIPT",
                )
        if delay is None:
            await client.ack(*receipts)
        else:
            await client.nack(*receipts, delay=delay)


@click.command()
@click.argument("queue")
@click.argument("receipts", nargs=-1, required=True)
@group_option
@bootstrap_option
def ack(queue: str, receipts: tuple[str, ...], group: str | None, bootstrap: str) -> None:
    """Ack messages: done, deleted. RECEIPTS are PARTITION:OFFSET:DELIVERIES."""
    parsed = _receipts(queue, receipts, group)
    run(lambda: _settle(bootstrap, queue, parsed, group, None))
    click.echo(f"acked {len(parsed)} messages")


@click.command()
@click.argument("queue")
@click.argument("receipts", nargs=-1, required=True)
@click.option("--delay", type=SECONDS, default=0, help="Visible again after SECONDS.")
@group_option
@bootstrap_option
def nack(
    queue: str, receipts: tuple[str, ...], delay: float, group: str | None, bootstrap: str
) -> None:
    """Nack messages: delivered again after --delay (or dead-lettered)."""
    parsed = _receipts(queue, receipts, group)
    run(lambda: _settle(bootstrap, queue, parsed, group, delay))
    click.echo(f"nacked {len(parsed)} messages")

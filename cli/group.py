"""``mq group``: list and describe consumer groups, reset their offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import click

import mq

if TYPE_CHECKING:
    from mq.client.admin import GroupDescription

from .common import bootstrap_option, echo_table, run, security


@click.group()
def group() -> None:
    """Inspect consumer groups."""


@group.command(name="list")
@bootstrap_option
def list_(bootstrap: str) -> None:
    """Every group with members or committed offsets, and its state."""

    async def main() -> list[tuple[str, str]]:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            return await admin.list_groups()

    echo_table([list(g) for g in run(main)], ["GROUP", "STATE"])


@group.command()
@click.argument("group_id")
@bootstrap_option
def describe(group_id: str, bootstrap: str) -> None:
    """Members, what each owns, and per partition the committed offset and lag."""

    async def main() -> GroupDescription:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            return await admin.describe_group(group_id)

    described = run(main)
    click.echo(
        f"group {described.group_id}: {described.state}, assignor {described.assignor or '-'}, "
        f"generation {described.generation_id}"
    )
    owner = {tp: m.member_id for m in described.members for tp in m.assignment}
    rows = [
        [
            lag.topic,
            lag.partition,
            lag.committed_offset if lag.committed_offset >= 0 else "-",
            lag.high_watermark if lag.high_watermark >= 0 else "-",
            "-" if lag.lag is None else lag.lag,
            owner.get(mq.TopicPartition(lag.topic, lag.partition), "-"),
        ]
        for lag in described.offsets
    ]
    echo_table(rows, ["TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MEMBER"])
    for member in described.members:
        instance = f" (instance {member.group_instance_id})" if member.group_instance_id else ""
        click.echo(f"member {member.member_id}{instance} {member.client_host}")


@group.command(name="reset-offsets")
@click.argument("group_id")
@click.option("--topic", required=True, help="The topic whose offsets to reset.")
@click.option("--to-earliest", "where", flag_value="earliest", help="To each log start.")
@click.option("--to-latest", "where", flag_value="latest", help="To each log end.")
@click.option("--to-offset", type=click.IntRange(min=0), help="To this offset.")
@bootstrap_option
def reset_offsets(
    group_id: str, topic: str, where: str | None, to_offset: int | None, bootstrap: str
) -> None:
    """Commit new offsets for GROUP_ID (only while it has no active members)."""
    if (where is None) == (to_offset is None):
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset N")
    named: Literal["earliest", "latest"] = "earliest" if where == "earliest" else "latest"
    target: Literal["earliest", "latest"] | int = named if to_offset is None else to_offset

    async def main() -> dict[mq.TopicPartition, int]:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            return await admin.reset_offsets(group_id, topic, target)

    for tp, offset in sorted(run(main).items()):
        click.echo(f"{tp.topic} {tp.partition} -> {offset}")

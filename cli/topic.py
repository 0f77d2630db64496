"""``mq topic``: create, list, describe, alter, reassign and delete topics."""

from __future__ import annotations

import click

import mq

from .common import bootstrap_option, echo_table, parse_pairs, run, security


@click.group()
def topic() -> None:
    """Manage topics."""


@topic.command()
@click.argument("name")
@click.option("-p", "--partitions", type=click.IntRange(min=1), help="Partitions [broker default].")
@click.option(
    "-r", "--replication-factor", type=click.IntRange(min=1), help="Replicas per partition."
)
@click.option("-c", "--config", "configs", multiple=True, help="A topic setting KEY=VALUE.")
@click.option(
    "--if-not-exists", is_flag=True, help="Succeed if it exists (its settings unchanged)."
)
@bootstrap_option
def create(
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
    bootstrap: str,
) -> None:
    """Create topic NAME.

    With --if-not-exists an existing topic NAME is no error, as with Kafka's
    tools: it is left as it is, whatever its partitions and settings.
    """
    settings = parse_pairs(configs, "--config")

    async def main() -> bool:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            return await admin.create_topic(
                name, partitions or -1, replication_factor or -1, settings, exist_ok=if_not_exists
            )

    if run(main):
        click.echo(f"created topic {name}")
    else:
        click.echo(f"topic {name} already exists")


@topic.command(name="list")
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets).")
@bootstrap_option
def list_(internal: bool, bootstrap: str) -> None:
    """List topics."""

    async def main() -> list[str]:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            return await admin.list_topics(include_internal=internal)

    for name in sorted(run(main)):
        click.echo(name)


@topic.command()
@click.argument("name")
@bootstrap_option
def describe(name: str, bootstrap: str) -> None:
    """Partitions, leaders, replicas and settings of topic NAME."""

    async def main() -> mq.client.admin.TopicDescription:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            return await admin.describe_topic(name)

    described = run(main)
    click.echo(f"topic {described.name}{' (internal)' if described.internal else ''}")
    rows = [
        [
            p.partition,
            p.leader,
            p.leader_epoch,
            ",".join(map(str, p.replicas)),
            ",".join(map(str, p.isr)),
        ]
        for p in described.partitions
    ]
    echo_table(rows, ["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR"])
    if described.configs:
        click.echo("settings:")
        for key, value in sorted(described.configs.items()):
            click.echo(f"  {key}={value}")


@topic.command()
@click.argument("name")
@click.option("-c", "--config", "configs", multiple=True, help="Set KEY=VALUE.")
@click.option("--reset", "resets", multiple=True, help="Put KEY back to the broker default.")
@bootstrap_option
def alter(name: str, configs: tuple[str, ...], resets: tuple[str, ...], bootstrap: str) -> None:
    """Change settings of topic NAME."""
    changes: dict[str, str | None] = dict(parse_pairs(configs, "--config"))
    changes.update({key: None for key in resets})
    if not changes:
        raise click.UsageError("nothing to change: give --config KEY=VALUE or --reset KEY")

    async def main() -> None:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            await admin.alter_configs(name, changes)

    run(main)
    click.echo(f"altered topic {name}")


def parse_replicas(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    """``"1,2,4"`` as node ids (a click callback)."""
    if value is None:
        return None
    try:
        replicas = tuple(int(node) for node in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a list of node ids like 1,2,4") from None
    if any(node < 0 for node in replicas):
        raise click.BadParameter(f"{value!r} has a negative node id")
    return replicas


@topic.command()
@click.argument("name")
@click.option("-p", "--partition", type=click.IntRange(min=0), required=True, help="Partition.")
@click.option(
    "--replicas",
    callback=parse_replicas,
    help="New replicas N,N,... (node ids), the preferred leader first.",
)
@click.option("--cancel", is_flag=True, help="Cancel the move in progress instead.")
@bootstrap_option
def reassign(
    name: str, partition: int, replicas: tuple[int, ...] | None, cancel: bool, bootstrap: str
) -> None:
    """Move a partition of topic NAME to other brokers (or cancel the move).

    The move completes in the background once the new replicas have caught up;
    leadership then goes to the first of them.
    """
    if cancel == (replicas is not None):
        raise click.UsageError("give either --replicas N,N,... or --cancel")
    tp = mq.TopicPartition(name, partition)

    async def main() -> None:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            await admin.reassign_partitions({tp: replicas})

    run(main)
    if replicas is None:
        click.echo(f"cancelled the move of {name}-{partition}")
    else:
        click.echo(f"moving {name}-{partition} to {','.join(map(str, replicas))}")


@topic.command()
@click.argument("name")
@bootstrap_option
def delete(name: str, bootstrap: str) -> None:
    """Delete topic NAME and all its data."""

    async def main() -> None:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            await admin.delete_topic(name)

    run(main)
    click.echo(f"deleted topic {name}")

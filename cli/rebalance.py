"""``mq cluster rebalance``: spread replicas and preferred leaders evenly over the live brokers.

Reads the cluster with the admin client, plans the moves with
:func:`~mq.replication.placement.rebalance_plan` (pure: the fewest replica
moves that even out the brokers, new ones included; preferred leaders evened
out by reordering replicas), prints them, submits them as partition
reassignments and asks for a preferred leader election. Moved partitions
hand leadership to their new preferred leader themselves once their new
replicas have caught up.
"""

from __future__ import annotations

import click

import mq
from mq.replication.placement import PartitionState, TopicPartitionKey, rebalance_plan

from .common import bootstrap_option, echo_table, run, security


def _fmt(replicas: tuple[int, ...]) -> str:
    return ",".join(map(str, replicas))


@click.command()
@click.option("--dry-run", is_flag=True, help="Print the plan without moving anything.")
@bootstrap_option
def rebalance(dry_run: bool, bootstrap: str) -> None:
    """Spread replicas and preferred leaders evenly over the live brokers."""

    async def main() -> None:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            cluster = await admin.describe_cluster()
            moving = await admin.list_reassignments()
            states: dict[TopicPartitionKey, PartitionState] = {}
            for name, partitions in cluster.topics.items():
                for p in partitions:
                    pending = moving.get(mq.TopicPartition(name, p.partition))
                    states[(name, p.partition)] = PartitionState(
                        p.replicas,
                        p.leader,
                        p.leader_epoch,
                        p.isr,
                        pending.adding if pending else (),
                        pending.removing if pending else (),
                    )
            plan = rebalance_plan(states, cluster.brokers)
            if not plan:
                click.echo(f"balanced: nothing to move over brokers {_fmt(tuple(cluster.brokers))}")
                return
            rows = [
                [name, index, _fmt(states[(name, index)].target), _fmt(replicas)]
                for (name, index), replicas in sorted(plan.items())
            ]
            echo_table(rows, ["TOPIC", "PARTITION", "REPLICAS", "NEW REPLICAS"])
            if dry_run:
                click.echo(f"dry run: {len(plan)} partitions would move")
                return
            await admin.reassign_partitions(
                {mq.TopicPartition(name, index): r for (name, index), r in plan.items()}
            )
            click.echo(f"moving {len(plan)} partitions")
            try:
                elected = await admin.elect_leaders()
            except mq.MQError as exc:  # some preferred leaders are not in sync yet
                click.echo(f"preferred leader election: {exc.name}: {exc.message}", err=True)
            else:
                click.echo(f"{len(elected)} partitions now led by their preferred leader")

    run(main)

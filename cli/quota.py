"""``mq quota``: client quotas per user, client id, or both, and their defaults."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

import mq

from .common import bootstrap_option, echo_table, run, security

OPTION_KEYS = {
    "produce_bytes_per_sec": "producer_byte_rate",
    "fetch_bytes_per_sec": "consumer_byte_rate",
    "request_percentage": "request_percentage",
}
"""CLI option → quota key (Kafka's names on the wire and in ``describe``)."""


def entity_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--user", help="A user (principal name, e.g. alice or ANONYMOUS)."),
            click.option("--default-user", is_flag=True, help="The default user."),
            click.option("--client-id", help="A client id."),
            click.option("--default-client-id", is_flag=True, help="The default client id."),
        ]
    ):
        func = option(func)
    return func


def value_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option(
                "--produce-bytes-per-sec", type=click.IntRange(min=1), help="producer_byte_rate."
            ),
            click.option(
                "--fetch-bytes-per-sec", type=click.IntRange(min=1), help="consumer_byte_rate."
            ),
            click.option(
                "--request-percentage",
                type=click.IntRange(1, 100),
                help="request_percentage: share of the broker's event loop.",
            ),
        ]
    ):
        func = option(func)
    return func


def entity_of(
    user: str | None, default_user: bool, client_id: str | None, default_client_id: bool
) -> mq.QuotaEntity:
    try:
        return mq.QuotaEntity(
            user=user,
            client_id=client_id,
            default_user=default_user,
            default_client_id=default_client_id,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


@click.group()
def quota() -> None:
    """Manage client quotas (per user, client id, or both)."""


@quota.command(name="set")
@entity_options
@value_options
@bootstrap_option
def set_(
    user: str | None,
    default_user: bool,
    client_id: str | None,
    default_client_id: bool,
    bootstrap: str,
    **values: int | None,
) -> None:
    """Set quotas of a user, a client id, both, or a default.

    Applied by every broker within a second; a throttled client is told how
    long to wait and is not read meanwhile.
    """
    entity = entity_of(user, default_user, client_id, default_client_id)
    chosen = {OPTION_KEYS[k]: v for k, v in values.items() if v is not None}
    if not chosen:
        raise click.UsageError("give at least one quota to set")

    async def main() -> None:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            await admin.alter_client_quotas(entity, chosen)

    run(main)
    click.echo(f"set {', '.join(f'{k}={v}' for k, v in chosen.items())} for {entity}")


@quota.command()
@entity_options
@click.option("--produce-bytes-per-sec", is_flag=True, help="Only producer_byte_rate.")
@click.option("--fetch-bytes-per-sec", is_flag=True, help="Only consumer_byte_rate.")
@click.option("--request-percentage", is_flag=True, help="Only request_percentage.")
@bootstrap_option
def remove(
    user: str | None,
    default_user: bool,
    client_id: str | None,
    default_client_id: bool,
    bootstrap: str,
    **which: bool,
) -> None:
    """Remove quotas of an entity (all of them unless some are named)."""
    entity = entity_of(user, default_user, client_id, default_client_id)
    keys = [OPTION_KEYS[k] for k, on in which.items() if on] or list(OPTION_KEYS.values())

    async def main() -> None:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            await admin.alter_client_quotas(entity, remove=keys)

    run(main)
    click.echo(f"removed {', '.join(keys)} for {entity}")


@quota.command()
@entity_options
@bootstrap_option
def describe(
    user: str | None,
    default_user: bool,
    client_id: str | None,
    default_client_id: bool,
    bootstrap: str,
) -> None:
    """List quotas (of the entities matching the options given, else all)."""
    given = user is not None or default_user or client_id is not None or default_client_id
    entity = entity_of(user, default_user, client_id, default_client_id) if given else None

    async def main() -> list[mq.ClientQuota]:
        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            return await admin.describe_client_quotas(entity)

    rows = [
        [str(found.entity), key, value]
        for found in run(main)
        for key, value in sorted(found.values.items())
    ]
    echo_table(rows, ["ENTITY", "QUOTA", "VALUE"])

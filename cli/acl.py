"""``mq acl``: add, list and remove ACL bindings (Kafka's ``kafka-acls.sh``).

Through a running broker (``--bootstrap``, the default; the principal of the
connection needs ALTER on the cluster to change ACLs, DESCRIBE to list them),
or **offline**, straight into the metadata store: ``--data-dir DIR`` for the
embedded store of a single node that is not running (to bootstrap a secured
broker before its first start), or ``--metadata etcd://HOST:PORT`` for a
cluster's etcd (whoever can reach the etcd is trusted: it holds everything).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .common import bootstrap_option, echo_table, run, security

OPERATIONS = [
    "read",
    "write",
    "create",
    "delete",
    "alter",
    "describe",
    "describe_configs",
    "alter_configs",
    "cluster_action",
    "idempotent_write",
    "all",
]


@click.group()
def acl() -> None:
    """Manage ACLs: who may do what on which topic, group, queue or the cluster."""


def _resource_options(func: Any) -> Any:
    for option in reversed(
        [
            click.option("--topic", help="A topic (with --prefixed: every topic starting so)."),
            click.option("--group", help="A consumer group."),
            click.option("--queue", help="A queue (its share group's name)."),
            click.option("--cluster", is_flag=True, help="The cluster itself."),
            click.option(
                "--prefixed", is_flag=True, help="The name is a prefix (default: literal)."
            ),
        ]
    ):
        func = option(func)
    return func


def _store_options(func: Any) -> Any:
    for option in reversed(
        [
            bootstrap_option,
            click.option(
                "--data-dir",
                type=click.Path(file_okay=False, path_type=Path),
                help="Offline: the data directory of a single node that is not running.",
            ),
            click.option(
                "--metadata",
                metavar="etcd://HOST:PORT",
                help="Offline: the cluster's etcd, written directly.",
            ),
        ]
    ):
        func = option(func)
    return func


def _resource(
    topic: str | None, group: str | None, queue: str | None, cluster: bool, *, required: bool
) -> tuple[str, str] | None:
    from mq.acl.model import CLUSTER_NAME

    given = [
        (kind, name)
        for kind, name in (("topic", topic), ("group", group), ("queue", queue))
        if name is not None
    ]
    if cluster:
        given.append(("cluster", CLUSTER_NAME))
    if len(given) > 1:
        raise click.UsageError("give one of --topic, --group, --queue, --cluster")
    if not given:
        if required:
            raise click.UsageError("give the resource: --topic, --group, --queue or --cluster")
        return None
    return given[0]


@acl.command()
@click.option("--principal", required=True, help="User:NAME (or NAME), or User:* for everyone.")
@click.option(
    "--operation",
    "operations",
    multiple=True,
    required=True,
    type=click.Choice(OPERATIONS),
    help="The operation (repeatable).",
)
@_resource_options
@click.option("--deny", is_flag=True, help="A deny binding (deny wins over allow).")
@click.option("--host", default="*", show_default=True, help="Only from this client address.")
@_store_options
def add(
    principal: str,
    operations: tuple[str, ...],
    topic: str | None,
    group: str | None,
    queue: str | None,
    cluster: bool,
    prefixed: bool,
    deny: bool,
    host: str,
    bootstrap: str,
    data_dir: Path | None,
    metadata: str | None,
) -> None:
    """Allow (or with --deny, deny) PRINCIPAL the operations on a resource."""
    from mq.acl.model import (
        AclBinding,
        InvalidAclError,
        Operation,
        PatternType,
        Permission,
        ResourceType,
        user_principal,
    )

    found = _resource(topic, group, queue, cluster, required=True)
    assert found is not None
    kind, name = found
    try:
        bindings = [
            AclBinding(
                user_principal(principal),
                Permission.DENY if deny else Permission.ALLOW,
                Operation(op),
                ResourceType(kind),
                name,
                PatternType.PREFIXED if prefixed else PatternType.LITERAL,
                host,
            )
            for op in operations
        ]
    except InvalidAclError as exc:
        raise click.UsageError(str(exc)) from None

    async def online() -> None:
        import mq

        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            await admin.create_acls(bindings)

    async def offline() -> None:
        from mq.broker.acl_store import put_bindings

        async with _offline_store(data_dir, metadata) as store:
            await put_bindings(store, bindings)

    run(offline if data_dir or metadata else online)
    for binding in bindings:
        click.echo(f"added: {binding.describe()}")


def _filter(
    principal: str | None,
    operation: str | None,
    resource: tuple[str, str] | None,
    prefixed: bool,
    deny: bool | None,
) -> Any:
    from mq.acl.model import (
        AclFilter,
        Operation,
        PatternType,
        Permission,
        ResourceType,
        user_principal,
    )

    return AclFilter(
        principal=None if principal is None else user_principal(principal),
        permission=None if deny is None else (Permission.DENY if deny else Permission.ALLOW),
        operation=None if operation is None else Operation(operation),
        resource_type=None if resource is None else ResourceType(resource[0]),
        resource_name=None if resource is None else resource[1],
        pattern=(PatternType.PREFIXED if prefixed else PatternType.LITERAL) if resource else None,
    )


@acl.command(name="list")
@click.option("--principal", help="Only this principal's bindings.")
@click.option("--operation", type=click.Choice(OPERATIONS), help="Only this operation's.")
@_resource_options
@_store_options
def list_(
    principal: str | None,
    operation: str | None,
    topic: str | None,
    group: str | None,
    queue: str | None,
    cluster: bool,
    prefixed: bool,
    bootstrap: str,
    data_dir: Path | None,
    metadata: str | None,
) -> None:
    """List the ACL bindings (all, or those matching the options)."""
    resource = _resource(topic, group, queue, cluster, required=False)
    acl_filter = _filter(principal, operation, resource, prefixed, None)

    async def online() -> list[Any]:
        import mq

        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            return await admin.describe_acls(acl_filter)

    async def offline() -> list[Any]:
        from mq.broker.acl_store import read_bindings

        async with _offline_store(data_dir, metadata) as store:
            bindings, _ = await read_bindings(store)
        return [b for b in bindings if acl_filter.matches(b)]

    found = run(offline if data_dir or metadata else online)
    rows = [
        [
            b.principal,
            b.permission.value,
            b.operation.value,
            b.resource_type.value,
            b.pattern.value,
            b.resource_name,
            b.host,
        ]
        for b in sorted(found, key=lambda b: (b.resource_type.value, b.resource_name, b.principal))
    ]
    echo_table(rows, ["PRINCIPAL", "PERMISSION", "OPERATION", "TYPE", "PATTERN", "NAME", "HOST"])


@acl.command()
@click.option("--principal", help="Only this principal's bindings.")
@click.option("--operation", type=click.Choice(OPERATIONS), help="Only this operation's.")
@_resource_options
@click.option("--deny/--allow", "deny", default=None, help="Only deny (or allow) bindings.")
@click.option("--all", "everything", is_flag=True, help="Remove every binding of the cluster.")
@_store_options
def remove(
    principal: str | None,
    operation: str | None,
    topic: str | None,
    group: str | None,
    queue: str | None,
    cluster: bool,
    prefixed: bool,
    deny: bool | None,
    everything: bool,
    bootstrap: str,
    data_dir: Path | None,
    metadata: str | None,
) -> None:
    """Remove the ACL bindings matching the options."""
    resource = _resource(topic, group, queue, cluster, required=False)
    if resource is None and principal is None and not everything:
        raise click.UsageError(
            "say which bindings: --principal and/or a resource (or --all for every one)"
        )
    acl_filter = _filter(principal, operation, resource, prefixed, deny)

    async def online() -> list[Any]:
        import mq

        async with mq.Admin(bootstrap=bootstrap, **security()) as admin:
            return await admin.delete_acls([acl_filter])

    async def offline() -> list[Any]:
        from mq.broker.acl_store import delete_bindings, read_bindings

        async with _offline_store(data_dir, metadata) as store:
            bindings, _ = await read_bindings(store)
            doomed = [b for b in bindings if acl_filter.matches(b)]
            await delete_bindings(store, doomed)
        return doomed

    removed = run(offline if data_dir or metadata else online)
    for binding in removed:
        click.echo(f"removed: {binding.describe()}")
    if not removed:
        click.echo("no binding matched")


def _offline_store(data_dir: Path | None, metadata: str | None) -> Any:
    from .acl_offline import offline_store

    return offline_store(data_dir, metadata)

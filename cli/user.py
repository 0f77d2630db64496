"""``mq user``: SASL/SCRAM users, through a running broker or offline.

Online (the default) the commands go through a broker's user APIs (a super user's
job once ACLs are on; ``--command-config`` says how to connect). Offline,
``--data-dir DIR`` writes the embedded metadata store of a stopped single node
(so a fresh secured broker can be bootstrapped before its first start) and
``--metadata etcd://HOST:PORT`` writes a cluster's etcd directly. The password is
read from stdin (``--password-stdin``), never from the command line; only SCRAM's
stored keys are kept (:mod:`mq.replication.scram_store`).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import click

from .common import bootstrap_option, echo_table, run, security

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 8192

offline_options = [
    click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Offline: the data directory of a stopped single-node broker.",
    ),
    click.option("--metadata", metavar="etcd://HOST:PORT", help="Offline: a cluster's etcd."),
]


def _offline(command: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(offline_options):
        command = option(command)
    return command


@asynccontextmanager
async def _store(data_dir: Path | None, metadata: str | None) -> AsyncIterator[object]:
    from mq.replication.etcd_store import EtcdStore
    from mq.replication.local_store import LocalStore
    from mq.replication.store import MetadataStore

    store: MetadataStore
    if metadata is not None:
        store = EtcdStore.from_url(metadata)
    else:
        assert data_dir is not None
        store = LocalStore(data_dir / "metadata.json")
    await store.start()
    try:
        yield store
    finally:
        await store.close()


def _prepare(data_dir: Path | None, metadata: str | None) -> None:
    """Offline on a data dir: it exists and no broker holds it."""
    if data_dir is not None and metadata is None:
        from .storage import _require_stopped

        data_dir.mkdir(parents=True, exist_ok=True)
        _require_stopped(data_dir)


def _read_password() -> str:
    line = sys.stdin.readline()
    password = line.rstrip("\r\n")
    if not password:
        raise click.ClickException("no password on stdin")
    return password


@click.group()
def user() -> None:
    """Manage SASL/SCRAM users: online through a broker, or offline in a data dir or etcd."""


@user.command("add")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin (required).")
@click.option(
    "--mechanism", type=click.Choice(MECHANISMS), default=MECHANISMS[0], show_default=True
)
@click.option(
    "--iterations", type=click.IntRange(4096, 16384), default=DEFAULT_ITERATIONS, show_default=True
)
@_offline
@bootstrap_option
def add(
    name: str,
    password_stdin: bool,
    mechanism: str,
    iterations: int,
    data_dir: Path | None,
    metadata: str | None,
    bootstrap: str,
) -> None:
    """Add a user, or set a user's password (read from stdin)."""
    if not password_stdin:
        raise click.UsageError(
            "give the password on stdin with --password-stdin (never as an argument)"
        )
    password = _read_password()

    async def main() -> None:
        if data_dir is None and metadata is None:
            import mq

            async with mq.Admin(bootstrap, **security()) as admin:
                await admin.add_user(name, password, mechanism=mechanism, iterations=iterations)
            return
        from mq.replication.scram_store import make_credential, put_credential

        credential = make_credential(mechanism, password, iterations=iterations)
        async with _store(data_dir, metadata) as store:
            await put_credential(store, name, mechanism, credential)  # type: ignore[arg-type]

    _prepare(data_dir, metadata)
    run(main)
    click.echo(f"user {name}: {mechanism} credential set")


@user.command("delete")
@click.argument("name")
@click.option("--mechanism", type=click.Choice(MECHANISMS), help="Only this one [all].")
@_offline
@bootstrap_option
def delete(
    name: str, mechanism: str | None, data_dir: Path | None, metadata: str | None, bootstrap: str
) -> None:
    """Delete a user's credentials."""

    async def main() -> None:
        if data_dir is None and metadata is None:
            import mq

            async with mq.Admin(bootstrap, **security()) as admin:
                await admin.delete_user(name, mechanism=mechanism)
            return
        from mq.replication.scram_store import delete_credential

        async with _store(data_dir, metadata) as store:
            if not await delete_credential(store, name, mechanism):  # type: ignore[arg-type]
                raise click.ClickException(f"user {name!r} has no such credential")

    _prepare(data_dir, metadata)
    run(main)
    click.echo(f"user {name}: deleted")


@user.command("list")
@_offline
@bootstrap_option
def list_users(data_dir: Path | None, metadata: str | None, bootstrap: str) -> None:
    """List the users and their mechanisms (never their keys)."""

    async def main() -> dict[str, dict[str, int]]:
        if data_dir is None and metadata is None:
            import mq

            async with mq.Admin(bootstrap, **security()) as admin:
                return await admin.list_users()
        from mq.replication.scram_store import read_users

        async with _store(data_dir, metadata) as store:
            users, _ = await read_users(store)  # type: ignore[arg-type]
        return {name: {m: c.iterations for m, c in creds.items()} for name, creds in users.items()}

    _prepare(data_dir, metadata)
    users = run(main)
    rows = [
        [name, mech, iterations]
        for name in sorted(users)
        for mech, iterations in sorted(users[name].items())
    ]
    echo_table(rows, ["USER", "MECHANISM", "ITERATIONS"])

"""``mq acl ... --data-dir DIR | --metadata etcd://...``: the metadata store, opened directly.

The embedded store is a file the running broker owns: it is opened only while
the data directory's lock (the one ``mq serve`` holds) is free, so an offline
change never races a broker. etcd takes writes from anyone who can reach it:
the brokers' watches pick the change up at once.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import click

from mq.broker.broker import METADATA_FILE
from mq.replication.etcd_store import EtcdStore
from mq.replication.local_store import LocalStore
from mq.replication.store import MetadataStore


def _lock_file(data_dir: Path) -> int:
    """The data directory's lock file, opened (the directory made if it is new)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


@asynccontextmanager
async def offline_store(
    data_dir: Path | None, metadata: str | None
) -> AsyncIterator[MetadataStore]:
    """The started store of ``data_dir`` (locked against a broker) or of the etcd URL."""
    if data_dir is not None and metadata is not None:
        raise click.UsageError("give --data-dir or --metadata, not both")
    if metadata is not None:
        if not metadata.startswith("etcd://"):
            raise click.BadParameter(
                f"{metadata!r} is not etcd://HOST:PORT", param_hint="--metadata"
            )
        store: MetadataStore = EtcdStore.from_url(metadata)
        await store.start()
        try:
            yield store
        finally:
            await store.close()
        return
    assert data_dir is not None
    fd = _lock_file(data_dir)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise click.ClickException(
                f"a broker is running on {data_dir}: change its ACLs through it (--bootstrap)"
            ) from None
        store = LocalStore(data_dir / METADATA_FILE)
        await store.start()
        try:
            yield store
        finally:
            await store.close()
    finally:
        os.close(fd)

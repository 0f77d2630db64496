"""Fixtures of the cluster tests: a real etcd per module, metadata stores of both kinds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from etcd_process import EtcdProcess

from mq.replication.etcd_store import EtcdStore
from mq.replication.local_store import LocalStore
from mq.replication.store import MetadataStore


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    process = EtcdProcess(tmp_path_factory.mktemp("etcd") / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(params=["local", "etcd"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MetadataStore]:
    """A started store; each etcd-backed one under a root of its own."""
    made: MetadataStore
    if request.param == "local":
        made = LocalStore(tmp_path / "metadata.json")
    else:
        etcd: EtcdProcess = request.getfixturevalue("etcd")
        made = EtcdStore.from_url(etcd.url, root=f"/test-{request.node.name}")
    await made.start()
    try:
        yield made
    finally:
        await made.close()

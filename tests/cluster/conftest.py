"""Fixtures of the cluster tests: a real etcd per module, metadata stores of both kinds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from cluster_helpers import CLUSTER_SETTINGS
from etcd_process import EtcdProcess

from mq.local_cluster import LocalCluster
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


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """Three real brokers (node ids 1..3) and their etcd, stopped after the test."""
    made = LocalCluster(tmp_path / "cluster", 3, settings=CLUSTER_SETTINGS)
    made.start()
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def http_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """Three real brokers and their etcd, each with an HTTP listener on a free port."""
    made = LocalCluster(tmp_path / "cluster", 3, settings=CLUSTER_SETTINGS, http=True)
    made.start()
    try:
        yield made
    finally:
        made.stop()

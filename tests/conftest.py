"""Shared test setup.

With pytest's default ``prepend`` import mode this file puts ``tests/`` on
``sys.path``, so test modules can ``import storage_helpers``.

``broker`` is one real ``mq serve`` per test module (tests use their own
topics), for the integration and Spark tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker"))
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def bootstrap(broker: BrokerProcess) -> str:
    """The shared broker's ``host:port``."""
    return broker.bootstrap

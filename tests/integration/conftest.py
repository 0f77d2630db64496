"""Real broker processes for integration tests.

``broker`` (one ``mq serve`` per test module, in ``tests/conftest.py``) and
``own_broker``, a fresh one per test, for tests that kill or restart it.
Each runs ``python -m mq_cli.main serve --data-dir DIR --port 0`` on loopback,
waits (bounded) for its ``mq listening on HOST:PORT`` line, and is stopped
with SIGTERM, then SIGKILL if it has not exited within a bounded wait.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess

RESTARTABLE_SEGMENT_BYTES = 16 * 1024 * 1024
"""Segment size of ``own_broker``. Recovery after kill -9 currently reads every
active segment's preallocated (sparse) length looking for stray bytes: with
the default 1 GiB segments that is ~4 s per partition here (~50 s for a
broker with ``__consumer_offsets``), longer than a test may take."""


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of this test's own, which it may kill and restart."""
    process = BrokerProcess(tmp_path / "data", segment_bytes=RESTARTABLE_SEGMENT_BYTES)
    process.start()
    try:
        yield process
    finally:
        process.stop()

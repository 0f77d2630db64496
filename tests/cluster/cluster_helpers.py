"""Helpers of the cluster tests: a 3-broker cluster, waiting on metadata, reading replicas."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mq import Admin
from mq.storage.config import LogConfig
from mq.storage.log import Log

CLUSTER_SETTINGS: dict[str, int | str] = {
    "session_timeout_ms": 2_000,
    "replica_lag_time_max_ms": 3_000,
    "replica_fetch_wait_max_ms": 200,
    "retention_check_ms": 600_000,
}
"""Short timeouts so failures are noticed in seconds (etcd leases are whole seconds)."""


async def wait_until(
    check: Callable[[], Awaitable[Any]], timeout_s: float = 30, what: str = "condition"
) -> Any:
    """Poll ``check`` until it returns something truthy (bounded); return that."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except Exception as exc:  # a broker down or not ready yet: try again
            last = exc
        else:
            if last:
                return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} did not happen in {timeout_s} s (last: {last!r})")


async def metadata(bootstrap: str) -> dict[str, Any]:
    async with Admin(bootstrap=bootstrap, request_timeout_ms=3_000) as admin:
        response: dict[str, Any] = await admin._client.fetch_all_metadata()
        return response


async def partition_state(bootstrap: str, topic: str, index: int) -> dict[str, Any] | None:
    for entry in (await metadata(bootstrap))["topics"]:
        if entry["name"] == topic:
            for part in entry["partitions"]:
                if part["partition"] == index:
                    return dict(part)
    return None


def replica_batches(directory: Path) -> bytes:
    """Every batch of a replica's log, as bytes (the broker must be stopped)."""
    log = Log.open(directory, LogConfig())
    try:
        out, offset = bytearray(), log.log_start_offset
        while (found := log.read(offset, 1 << 20)) is not None:
            out += found.data
            offset = found.next_offset
        return bytes(out)
    finally:
        log.close()

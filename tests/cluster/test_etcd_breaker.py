"""The etcd store's circuit breaker with a real etcd that goes away and comes back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from etcd_process import EtcdProcess

from mq.replication.etcd_store import EtcdStore
from mq.replication.store import MetadataStoreError


async def test_calls_fail_fast_while_etcd_is_down_and_recover_after_it_returns(
    tmp_path: Path,
) -> None:
    etcd = EtcdProcess(tmp_path / "etcd")
    etcd.start()
    store = EtcdStore.from_url(etcd.url, root="/breaker")
    try:
        await store.start()
        await store.put("/k", b"v")
        etcd.kill()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # each failure counts (connect refused or timeout)
            try:
                await store.get("/k")
            except MetadataStoreError as exc:
                if "circuit breaker open" in str(exc):
                    break
        started = time.monotonic()
        with pytest.raises(MetadataStoreError, match="circuit breaker open"):
            await store.get("/k")
        assert time.monotonic() - started < 0.1  # no timeout waited out
        etcd.start()
        deadline = time.monotonic() + 60
        while True:  # after the cool-down a trial goes through and closes the breaker
            try:
                entry = await store.get("/k")
                break
            except MetadataStoreError:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
        assert entry is not None
        assert entry.value == b"v"
    finally:
        await store.close()
        etcd.stop()

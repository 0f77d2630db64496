"""The broker's quota cache: watch events applied, bounds, resolution to shared buckets."""

from __future__ import annotations

from pathlib import Path

import pytest

from mq.broker.config import BrokerConfig
from mq.broker.quotas import MAX_ENTITIES, QuotaManager, pack_values
from mq.errors import InvalidRequestError
from mq.quotas import entities as q
from mq.quotas.entities import entity
from mq.replication.local_store import LocalStore
from mq.replication.store import EventKind, WatchEvent


async def test_changes_apply_and_shared_entities_share_a_bucket(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "metadata.json")
    await store.start()
    manager = QuotaManager(store, BrokerConfig())
    await manager.start()
    try:
        assert not manager.active
        await manager.alter(entity("alice"), [(q.PRODUCER_BYTE_RATE, 1000.0)], validate_only=False)
        await manager.alter(
            entity(client_id=None), [(q.CONSUMER_BYTE_RATE, 500.0)], validate_only=False
        )
        while len(manager.quotas) < 2:
            await manager.changed.wait()
        a1 = manager.resolved("User:alice", "app-1", 0.0)
        a2 = manager.resolved("User:alice", "app-2", 0.0)
        assert a1[q.PRODUCER_BYTE_RATE] is a2[q.PRODUCER_BYTE_RATE]  # the user's, shared
        assert a1[q.CONSUMER_BYTE_RATE] is not a2[q.CONSUMER_BYTE_RATE]  # per client id
        assert manager.charge(a1, q.PRODUCER_BYTE_RATE, 1500, 0.0) == pytest.approx(0.5)
        assert manager.charge(a2, q.PRODUCER_BYTE_RATE, 0, 0.0) == pytest.approx(0.5)
        await manager.alter(entity("alice"), [(q.PRODUCER_BYTE_RATE, None)], validate_only=False)
        while entity("alice") in manager.quotas:
            await manager.changed.wait()
        assert q.PRODUCER_BYTE_RATE not in manager.resolved("User:alice", "app-1", 0.0)
    finally:
        await manager.stop()
        await store.close()


def test_malformed_entries_are_ignored() -> None:
    manager = QuotaManager(None, BrokerConfig())  # type: ignore[arg-type]
    manager.apply(WatchEvent(EventKind.PUT, "/quotas/host/x", pack_values({}), 5))
    manager.apply(WatchEvent(EventKind.PUT, q.store_key(entity("a")), b"\xc1", 6))
    assert manager.quotas == {}
    manager.apply(WatchEvent(EventKind.PUT, q.store_key(entity("a")), pack_values({"x": 1}), 7))
    assert manager.quotas == {entity("a"): {}}


async def test_entities_are_bounded() -> None:
    manager = QuotaManager(None, BrokerConfig())  # type: ignore[arg-type]
    manager.quotas = {entity(str(i)): {q.PRODUCER_BYTE_RATE: 1.0} for i in range(MAX_ENTITIES)}
    with pytest.raises(InvalidRequestError, match="entities have quotas already"):
        await manager.alter(entity("new"), [(q.PRODUCER_BYTE_RATE, 5.0)], validate_only=True)
    # changing an entity that has quotas is still fine
    await manager.alter(entity("7"), [(q.PRODUCER_BYTE_RATE, 5.0)], validate_only=True)

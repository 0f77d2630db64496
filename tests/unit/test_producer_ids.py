"""Producer ids come in blocks from the metadata store: unique across brokers and restarts."""

from __future__ import annotations

from pathlib import Path

from mq.broker.producer_ids import BLOCK_SIZE, LEGACY_FILE, MAX_EPOCH, ProducerIdAllocator
from mq.replication.local_store import LocalStore


async def test_two_brokers_never_hand_out_the_same_id(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "metadata.json")
    await store.start()
    try:
        first = ProducerIdAllocator(store, tmp_path / "a")
        second = ProducerIdAllocator(store, tmp_path / "b")
        ids = [
            await allocator.allocate()
            for _ in range(BLOCK_SIZE + 5)
            for allocator in (first, second)
        ]
        assert len(ids) == len(set(ids))
    finally:
        await store.close()


async def test_a_restart_skips_ahead_never_back(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "metadata.json")
    await store.start()
    before = await ProducerIdAllocator(store, tmp_path).allocate()
    await store.close()
    store = LocalStore(tmp_path / "metadata.json")
    await store.start()
    try:
        after = await ProducerIdAllocator(store, tmp_path).allocate()
        assert after >= before + BLOCK_SIZE
    finally:
        await store.close()


async def test_ids_of_an_older_data_directory_are_not_reused(tmp_path: Path) -> None:
    (tmp_path / LEGACY_FILE).write_text("5000\n")
    store = LocalStore()
    await store.start()
    try:
        assert await ProducerIdAllocator(store, tmp_path).allocate() == 5000
    finally:
        await store.close()


async def test_an_epoch_bump_keeps_the_id_until_the_epoch_would_overflow(tmp_path: Path) -> None:
    store = LocalStore()
    await store.start()
    try:
        allocator = ProducerIdAllocator(store, tmp_path)
        assert await allocator.bump(7, 3) == (7, 4)
        pid, epoch = await allocator.bump(7, MAX_EPOCH)
        assert pid != 7
        assert epoch == 0
    finally:
        await store.close()

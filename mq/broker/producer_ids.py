"""Producer ids for idempotent producers: unique across the cluster, for its whole life.

Each broker takes blocks of ids from the metadata store: the key
``/producer_ids`` holds the start of the next free block, advanced by
compare-and-swap, so two brokers never get the same block and a crash only
skips ids. A data directory from before the metadata store kept its next id
in ``<data>/producer-ids``; the first block starts past it.

What partitions remember of producers is bounded (issue 18, F7): :func:`bound_log`
applies ``producer_id_expiration_ms`` and ``max_producer_ids_per_partition`` to a log
as it opens, and :func:`expire_loop` every ``producer_id_expiration_check_ms`` to each
partition, through its writer (never per record). Handing ids out is not rate-limited
yet (Kafka 3.6+ has a ``producer_ids_rate`` quota, KIP-936): an id costs the broker
nothing until a partition records a batch of it, and that is what is bounded.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import msgpack

from mq.errors import MQError
from mq.replication.store import Compare, MetadataStore, Put
from mq.storage.log import Log

if TYPE_CHECKING:
    from mq.broker.config import BrokerConfig
    from mq.broker.partition import Partition

log = logging.getLogger(__name__)

KEY = "/producer_ids"
LEGACY_FILE = "producer-ids"
BLOCK_SIZE = 1000
"""Ids reserved per write of the store: one round trip per thousand producers."""
MAX_EPOCH = 32_767
"""producerEpoch is an int16 in the batch header."""
ATTEMPTS = 20


class ProducerIdAllocator:
    def __init__(self, store: MetadataStore, data_dir: Path) -> None:
        self._store = store
        self._legacy = data_dir / LEGACY_FILE
        self._next = 0
        self._block_end = 0
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._block_end:
                self._next = await self._take_block()
                self._block_end = self._next + BLOCK_SIZE
            pid = self._next
            self._next += 1
            return pid

    async def _take_block(self) -> int:
        for _ in range(ATTEMPTS):
            entry = await self._store.get(KEY)
            start = int(msgpack.unpackb(entry.value)) if entry else self._legacy_next()
            revision = entry.mod_revision if entry else 0
            done = await self._store.commit(
                [Compare(KEY, revision)], [Put(KEY, msgpack.packb(start + BLOCK_SIZE))]
            )
            if done is not None:
                return start
        raise MQError("could not reserve producer ids: the store kept changing")

    def _legacy_next(self) -> int:
        try:
            return int(self._legacy.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    async def bump(self, producer_id: int, epoch: int) -> tuple[int, int]:
        """The next epoch of an existing id (a new id once the epoch would overflow)."""
        if producer_id < 0 or epoch + 1 > MAX_EPOCH:
            return await self.allocate(), 0
        return producer_id, max(epoch, -1) + 1


def expiry_cutoff_ms(config: BrokerConfig) -> int:
    """Producers whose newest batch is older than this (wall clock, ms) are expired."""
    return int(time.time() * 1000) - config.producer_id_expiration_ms


def bound_log(log_: Log, config: BrokerConfig) -> int:
    """Apply the producer bounds to a log (as it opens, before its writer starts)."""
    return log_.producers.bound(config.max_producer_ids_per_partition, expiry_cutoff_ms(config))


async def expire_loop(partitions: Callable[[], Iterable[Partition]], config: BrokerConfig) -> None:
    """Every ``producer_id_expiration_check_ms``, expire idle producers of each partition."""
    while True:
        await asyncio.sleep(config.producer_id_expiration_check_ms / 1000)
        cutoff = expiry_cutoff_ms(config)
        for partition in list(partitions()):
            try:
                gone = await partition.writer.call(partial(_expire, cutoff=cutoff))
            except MQError as exc:
                log.warning("expiring producer ids of %s: %s", partition.name, exc)
                continue
            if gone:
                log.info("%s: %d idle producer ids expired", partition.name, gone)


def _expire(log_: Log, cutoff: int) -> int:
    return log_.producers.expire(cutoff)

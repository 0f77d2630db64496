"""The broker's periodic passes over its partitions: retention and high-watermark
checkpoints (the idempotent producers' expiry is :func:`mq.broker.producer_ids.expire_loop`).

Each loop is one task for the whole broker, never per record; a partition's log is
only changed through its writer. Thread safety: the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from mq.broker.config import BrokerConfig
from mq.broker.partition import Partition
from mq.errors import MQError

log = logging.getLogger(__name__)


async def checkpoint_loop(
    partitions: Callable[[], Iterable[Partition]], config: BrokerConfig
) -> None:
    """Checkpoint every partition's high watermark that moved, periodically."""
    while True:
        await asyncio.sleep(config.high_watermark_checkpoint_ms / 1000)
        for partition in list(partitions()):
            partition.checkpoint_high_watermark()


async def retention_loop(
    partitions: Callable[[], Iterable[Partition]], config: BrokerConfig
) -> None:
    """Enforce every partition's retention every ``retention_check_ms``."""
    while True:
        await asyncio.sleep(config.retention_check_ms / 1000)
        for partition in list(partitions()):
            try:
                deleted = await partition.writer.call(lambda log_: log_.enforce_retention())
            except MQError as exc:
                log.warning("retention of %s: %s", partition.name, exc)
                continue
            if deleted:
                log.info("retention deleted %d segments of %s", deleted, partition.name)

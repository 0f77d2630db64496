"""The broker's log cleaner: compacts every ``cleanup.policy=compact`` partition in turn.

Every ``cleaner_backoff_ms`` it walks the hosted partitions; for each
compacted one it asks the partition's writer for a pass
(:meth:`~mq.storage.log.Log.begin_clean`, which says whether one is due), runs
it in a worker thread, and hands the result back to the writer to swap in.
One pass at a time, so the cleaner costs at most one core and one segment's
worth of reads at once, as Kafka's single default cleaner thread does.

Thread safety: one event loop; the pass itself runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging

from mq.broker.partition import Partition
from mq.errors import MQError
from mq.storage.cleaner import CleanJob

log = logging.getLogger(__name__)


class LogCleaner:
    """Runs compaction passes over the partitions it is given, one at a time."""

    def __init__(self, partitions: dict[tuple[str, int], Partition], backoff_ms: int) -> None:
        self._partitions = partitions
        self._backoff_s = backoff_ms / 1000
        self._task: asyncio.Task[None] | None = None
        self._running: tuple[Partition, CleanJob] | None = None
        self.passes = 0
        """Passes swapped in since the start (for tests and metrics)."""

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="log-cleaner")

    async def stop(self) -> None:
        self.forget(None)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def forget(self, partition: Partition | None) -> None:
        """Stop the pass over ``partition`` (None: any pass), which is closing."""
        if self._running is not None and partition in (None, self._running[0]):
            self._running[1].cancel()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._backoff_s)
            for partition in list(self._partitions.values()):
                if partition.log.config.compact:
                    await self.clean(partition)

    async def clean(self, partition: Partition) -> bool:
        """One pass over ``partition`` if one is due; whether one was swapped in."""
        try:
            job = await partition.writer.call(lambda log_: log_.begin_clean())
            if job is None:
                return False
            self._running = (partition, job)
            try:
                await asyncio.to_thread(job.run)
            finally:
                self._running = None
            done = await partition.writer.call(lambda log_: log_.end_clean(job))
        except MQError as exc:
            log.warning("compaction of %s: %s", partition.name, exc)
            return False
        self.passes += done
        return done

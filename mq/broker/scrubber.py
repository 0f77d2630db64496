"""The broker's scrubber: re-reads sealed segments at a bounded rate to find bit rot.

Recovery trusts a sealed segment (the recovery checkpoint says it reached the
disk), and a byte that rots in it later is only met by a reader. The scrubber
walks every sealed segment of every partition hosted here with
:func:`mq.storage.scrub.scrub_segment` (structure, CRC, offsets, leader
epochs), in a worker thread, paced to ``scrub_bytes_per_sec`` by sleeping in
that thread: the event loop only starts each segment's check and looks at its
result. A pass over everything is followed by a pause of ``scrub_interval_ms``.

A read that meets a damaged batch (a consumer's fetch, a follower's fetch)
reports it (:meth:`Scrubber.report_read`): that partition is checked at once,
ahead of the pass.

On damage: an ERROR log line naming the file, the offsets and the replica
(broker id, topic-partition), then :func:`mq.broker.repair.repair`. A damage
found is confirmed by a second check before anything is done: a follower's
truncation may be rewriting the segment that was being read.

A partition whose log fails to open (:meth:`Scrubber.open_failed`), or whose
log a failed write or sync takes offline (:meth:`Scrubber.log_offline`), is
reported the same way: this broker leaves its ISR, handing leadership to
another in-sync replica if it leads, so that the controller's elections go to
a replica that can serve it. It stays out while the log cannot serve (it does
not fetch, so no leader adds it back; if a leader acting on an older view
does, the replica manager withdraws it again) until the broker restarts.

Thread safety: one event loop; the worker threads only read files.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Final

from mq.broker import repair
from mq.broker.partition import Partition
from mq.errors import CorruptRecordError, MQError
from mq.storage.scrub import SegmentDamage, scrub_segment
from mq.storage.segment import Segment

if TYPE_CHECKING:
    from mq.broker.broker import Broker

log = logging.getLogger(__name__)

Key = tuple[str, int]

URGENT_BYTES_PER_SEC: Final = 16 * 1024 * 1024
"""Pace of the check a damaged read asks for when the periodic scrub is off
(``scrub_bytes_per_sec = 0``): a reader is waiting, but the disk is shared."""
RETRY_S: Final = 5.0
"""Pause before a failed repair (or a failed withdrawal after a failed open) is
tried again: long enough for an election to settle, short enough for a reader
waiting on retriable errors."""


class Scrubber:
    """Periodic and on-demand checks of the sealed segments hosted by one broker."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._rate = broker.config.scrub_bytes_per_sec
        self._interval_s = broker.config.scrub_interval_ms / 1000
        self._urgent: dict[Key, None] = {}
        """Partitions whose reads met damage: checked first (an ordered set)."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._repairs: dict[Key, asyncio.Task[None]] = {}
        self._withdrawals: dict[Key, asyncio.Task[None]] = {}
        self._stopped = False
        self.passes = 0
        """Completed passes over every sealed segment (for tests and stats)."""
        self.found: list[tuple[Key, SegmentDamage]] = []
        """Every damage found, oldest first (for tests and stats)."""

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="scrubber")

    async def stop(self) -> None:
        self._stopped = True  # no withdrawal starts after this (a log failing at close)
        tasks = [*self._repairs.values(), *self._withdrawals.values()]
        if self._task is not None:
            tasks.append(self._task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- reports ----------------------------------------------------------------------

    def report_read(self, partition: Partition, offset: int, exc: CorruptRecordError) -> None:
        """A read of ``partition`` at ``offset`` met a damaged batch: check it now."""
        key = (partition.topic, partition.index)
        if key in self._urgent or key in self._repairs or partition.damage is not None:
            return
        log.error(
            "%s: a read at offset %d on broker %d met a damaged batch: %s; scrubbing it now",
            partition.name,
            offset,
            self._broker.node_id,
            exc,
        )
        self._urgent[key] = None
        self._wake.set()

    def open_failed(self, topic: str, index: int) -> None:
        """The log of ``topic-index`` did not open here: leave its ISR (once, retried)."""
        self.withdraw((topic, index))

    def log_offline(self, partition: Partition) -> None:
        """A failed write or sync took ``partition``'s log offline here: it no longer
        leads or follows (its role is offline already); leave its ISR, handing
        leadership to another in-sync replica."""
        key = (partition.topic, partition.index)
        if self._stopped or self._broker.partitions.get(key) is not partition:
            return  # the broker stops, or the replica was dropped: nothing to hand on
        self._broker.replicas.apply_written(partition)  # out of every replica fetcher
        self.withdraw(key)

    def withdraw(self, key: Key) -> None:
        """Leave the ISR of ``key`` (a replica that cannot serve here), retried until out.

        Idempotent while a withdrawal runs; called again whenever the view shows this
        broker back in the ISR (or leading) while the replica still cannot serve.
        """
        if key in self._withdrawals or self._stopped:
            return
        task = asyncio.get_running_loop().create_task(self._withdraw(key))
        self._withdrawals[key] = task
        task.add_done_callback(lambda _: self._withdrawals.pop(key, None))  # may fail again

    async def _withdraw(self, key: Key) -> None:
        while True:
            try:
                if await repair.withdraw(self._broker, *key):
                    return
                log.error(
                    "%s-%d: no other live in-sync replica can take over from broker %d",
                    *key,
                    self._broker.node_id,
                )
            except MQError as exc:
                log.warning("%s-%d: leaving the ISR: %s", *key, exc)
            await asyncio.sleep(RETRY_S)

    # -- the loop ---------------------------------------------------------------------

    async def _run(self) -> None:
        next_pass = time.monotonic() if self._rate > 0 else float("inf")
        while True:
            while self._urgent:
                key = next(iter(self._urgent))
                try:
                    await self._check_partition(key)
                finally:
                    self._urgent.pop(key, None)
            if time.monotonic() >= next_pass:
                await self._pass()
                next_pass = time.monotonic() + self._interval_s
                continue
            self._wake.clear()
            timeout = None if next_pass == float("inf") else next_pass - time.monotonic()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    async def _pass(self) -> None:
        started = time.monotonic()
        for key in sorted(self._broker.partitions):
            while self._urgent:  # a damaged read does not wait for the pass
                urgent = next(iter(self._urgent))
                try:
                    await self._check_partition(urgent)
                finally:
                    self._urgent.pop(urgent, None)
            await self._check_partition(key)
        self.passes += 1
        log.info(
            "scrub pass %d done on broker %d in %.2f s: %d damaged so far",
            self.passes,
            self._broker.node_id,
            time.monotonic() - started,
            len(self.found),
        )

    async def _check_partition(self, key: Key) -> None:
        """Check one partition (a bug there must not stop the scrubber for the others)."""
        try:
            await self._check_sealed(key)
        except Exception:
            log.exception("scrub: checking %s-%d", *key)

    async def _check_sealed(self, key: Key) -> None:
        """Check every sealed segment of one partition; start a repair at the first damage."""
        partition = self._broker.partitions.get(key)
        if partition is None or key in self._repairs or partition.offline is not None:
            return  # an offline log is out of the ISR until a restart recovers it
        if partition.damage is not None:  # found before and not repaired yet: try again
            self._start_repair(partition, partition.damage, self._end_of(partition))
            return
        for segment in list(partition.log.segments[:-1]):
            found = await self._check_segment(partition, segment)
            if found is not None:
                damage, end = found
                self.found.append((key, damage))
                log.error(
                    "scrub: %s-%d replica on broker %d: %s (offsets %s)",
                    *key,
                    self._broker.node_id,
                    damage,
                    damage.offsets(end),
                )
                self._start_repair(partition, damage, end)
                return

    async def _check_segment(
        self, partition: Partition, segment: Segment
    ) -> tuple[SegmentDamage, int] | None:
        """The segment's damage and the offset it ends before, confirmed by a second read."""
        damage: SegmentDamage | None = None
        for _ in range(2):
            segments = partition.log.segments
            if (
                segment not in segments[:-1]
                or self._broker.partitions.get((partition.topic, partition.index)) is not partition
            ):
                return None  # deleted, compacted or truncated meanwhile
            next_base = segments[segments.index(segment) + 1].base_offset
            epochs = [(e.epoch, e.start_offset) for e in partition.log.epochs.entries]
            try:
                damage = await asyncio.to_thread(
                    scrub_segment,
                    segment.path,
                    segment.base_offset,
                    next_base=next_base,
                    epochs=epochs,
                    pace=self._pace,
                    min_end=max(segment.next_offset, segment.indexed_end or 0),
                )
            except FileNotFoundError:
                return None
            except OSError as exc:
                log.error("scrub: %s: cannot read %s: %s", partition.name, segment.path, exc)
                return None
            if damage is None:
                return None
        assert damage is not None
        return damage, self._end_of(partition, damage)

    def _end_of(self, partition: Partition, damage: SegmentDamage | None = None) -> int:
        """The offset the damaged segment's range ends before (the next segment's base)."""
        damage = damage or partition.damage
        assert damage is not None
        for segment in partition.log.segments:
            if segment.base_offset > damage.segment_base:
                return segment.base_offset
        return partition.log.next_offset

    def _pace(self, checked: int) -> None:
        """Sleep (in the worker thread) so that the scrub stays at its rate."""
        rate = self._rate or URGENT_BYTES_PER_SEC
        time.sleep(checked / rate)

    # -- repairs ----------------------------------------------------------------------

    def _start_repair(self, partition: Partition, damage: SegmentDamage, end: int) -> None:
        key = (partition.topic, partition.index)
        if key in self._repairs:
            return
        task = asyncio.get_running_loop().create_task(self._repair(partition, damage, end))
        self._repairs[key] = task

    async def _repair(self, partition: Partition, damage: SegmentDamage, end: int) -> None:
        key = (partition.topic, partition.index)
        try:
            if not await repair.repair(self._broker, partition, damage, end):
                await asyncio.sleep(RETRY_S)
                self._urgent[key] = None  # try again (after the pause)
                self._wake.set()
        except MQError as exc:
            log.error("%s: repair failed: %s", partition.name, exc)
            await asyncio.sleep(RETRY_S)
            self._urgent[key] = None
            self._wake.set()
        finally:
            self._repairs.pop(key, None)

"""The leader's writes of its partitions' ISR to the metadata store.

A follower that has not caught up for ``replica_lag_time_max_ms`` leaves the
ISR (checked periodically over the partitions led here); one that has caught
up joins it again (checked as it fetches). Each change is a compare-and-swap
of the partition's state that only succeeds while the state still names this
broker leader in the same epoch (:func:`~mq.replication.cluster_state.alter_isr`);
the partition applies the written state at once, without waiting for the
watch. One write per partition at a time.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Set
from typing import TYPE_CHECKING

from mq.broker.partition import Partition
from mq.errors import MQError
from mq.logs import partition_extra
from mq.replication import cluster_state

if TYPE_CHECKING:
    from mq.broker.broker import Broker

log = logging.getLogger(__name__)


class IsrManager:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._writing: set[tuple[str, int]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(
            self._shrink_loop(), name="isr-shrink"
        )

    async def stop(self) -> None:
        tasks = [*self._tasks, *([self._loop_task] if self._loop_task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def expand(self, partition: Partition, node: int) -> None:
        self._write(partition, partition.isr | {node}, f"node {node} caught up")

    async def _shrink_loop(self) -> None:
        lag_max = self._broker.config.replica_lag_time_max_ms
        while True:
            await asyncio.sleep(max(0.05, lag_max / 2000))
            for partition in list(self._broker.partitions.values()):
                try:
                    lagging = partition.lagging(lag_max)
                    if lagging and partition.is_leader:
                        self._write(
                            partition, partition.isr - lagging, f"{sorted(lagging)} lagging"
                        )
                except Exception:  # one partition's bug must not stop the others' checks
                    log.exception("%s: checking the ISR", partition.name)

    def _write(self, partition: Partition, isr: Set[int], why: str) -> None:
        key = (partition.topic, partition.index)
        if key in self._writing or not partition.is_leader or isr == partition.isr:
            return
        self._writing.add(key)
        task = asyncio.get_running_loop().create_task(self._alter(partition, isr, why))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _alter(self, partition: Partition, isr: Set[int], why: str) -> None:
        key = (partition.topic, partition.index)
        try:
            written = await cluster_state.alter_isr(
                self._broker.store,
                partition.topic,
                partition.index,
                self._broker.node_id,
                partition.leader_epoch,
                sorted(isr),
                based_on=partition.state_revision,
            )
            if written is None:
                return  # the state moved on (an election): the watch brings it
            state, revision = written
            log.info(
                "%s: ISR now %s (%s)",
                partition.name,
                list(state.isr),
                why,
                extra=partition_extra(partition.topic, partition.index),
            )
            if partition.apply_state(state, revision):
                self._broker.replicas.apply_written(partition)
        except MQError as exc:
            log.warning("%s: changing the ISR: %s", partition.name, exc)
        finally:
            self._writing.discard(key)

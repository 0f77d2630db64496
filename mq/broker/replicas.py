"""Makes the partitions a broker hosts match the cluster view.

For every partition the view assigns to this node the replica manager opens
the log (once), gives it the role of the state (leader, follower of a given
broker, offline) and hands followers to the :class:`ReplicaFetcher` of their
leader. A state that makes this node leader but was written before its
registration (its broker epoch) is not taken: the broker restarted or lost its
session since, and leads only once the controller elects it in a new leader
epoch (a fenced partition is offline here until then). A partition the view no
longer assigns here (its topic deleted, or reassigned away) is closed and its
directory removed. Topic config changes reconfigure the open logs.

Each partition directory holds a ``partition.metadata`` file with its topic's
id, so a directory left by a deleted topic is never taken for a new topic of
the same name (the broker was down while one went and the other came).

Logs are opened off the event loop (:mod:`mq.broker.opener`, a chunk at a
time in worker threads): a partition to open is queued, and its reconcile runs
again once its log is open, against the view as it is then. Until then it is
not in ``broker.partitions`` (not served); :meth:`ReplicaManager.opening` says
whether a topic still has partitions on the way.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import uuid
from typing import TYPE_CHECKING

from mq.broker import producer_ids
from mq.broker.catalog import OFFSETS_TOPIC, split_topic_configs, topic_log_config
from mq.broker.opener import OpenedLog, PartitionOpener
from mq.broker.partition import Partition, Role
from mq.errors import MQError
from mq.logs import partition_extra
from mq.replication.cluster_state import PARTITIONS, TOPICS, TopicRecord
from mq.replication.fetcher import ReplicaFetcher
from mq.replication.store import WatchEvent
from mq.storage.config import LogConfig

if TYPE_CHECKING:
    from mq.broker.broker import Broker

log = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")

Key = tuple[str, int]

OPEN_WAIT_S = 600.0
"""How long a topic's creation (or the broker's start) waits for its partitions' logs
to open: file system work only, so it ends; the bound is for a disk that hangs (an
fsync of a saturated disk takes tens of milliseconds, and 100,000 partitions make
200,000 of them, a few at a time)."""


class ReplicaManager:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._dropping: dict[Key, asyncio.Task[None]] = {}
        self._configs: dict[str, dict[str, str]] = {}
        """The configs each topic's open replicas were last given."""
        self._log_configs: dict[str, tuple[dict[str, str], LogConfig]] = {}
        """Each topic's parsed log settings, with the configs they were parsed from."""
        self._opener = PartitionOpener(broker.config.data_dir, self._opened, broker.keyring)

    def opening(self, topic: str) -> bool:
        """Whether partitions of ``topic`` assigned here are still being opened."""
        return self._opener.opening(topic)

    @property
    def opening_count(self) -> int:
        """Partitions queued to open or opening."""
        return len(self._opener)

    # -- events -----------------------------------------------------------------------

    def on_event(self, event: WatchEvent) -> None:
        if event.key.startswith(PARTITIONS):
            topic, _, index = event.key[len(PARTITIONS) :].rpartition("/")
            self.reconcile((topic, int(index)))
        elif event.key.startswith(TOPICS):
            self.reconcile_topic(event.key[len(TOPICS) :])

    def reconcile_all(self) -> None:
        view = self._broker.view
        for key in sorted(view.partitions):
            self.reconcile(key)
        for key in list(self._broker.partitions):
            if key not in view.partitions:
                self._drop(key)

    def reconcile_topic(self, name: str) -> None:
        topic = self._broker.view.topics.get(name)
        hosted = [key for key in self._broker.partitions if key[0] == name]
        if topic is None:
            for key in hosted:
                self._drop(key)
            self._configs.pop(name, None)
            self._log_configs.pop(name, None)
            return
        if name in self._configs and self._configs[name] != topic.configs:
            self._reconfigure(topic)
        for index in range(topic.partitions):
            self.reconcile((name, index))

    def reconcile(self, key: Key) -> None:
        """Bring one partition's replica here in line with the view."""
        broker = self._broker
        view = broker.view
        state = view.partitions.get(key)
        topic = view.topics.get(key[0])
        if state is None or topic is None or broker.node_id not in state.replicas:
            if key in broker.partitions:
                self._drop(key)
            return
        partition = broker.partitions.get(key)
        if partition is None:
            if key in self._dropping:  # the old replica's files are still going
                self._dropping[key].add_done_callback(lambda _: self.reconcile(key))
                return
            self._open(topic, key[1])  # reconciled again once its log is open
            return
        partition.min_insync_replicas = broker.min_insync_replicas(topic, len(state.replicas))
        if partition.offline is not None and (
            broker.node_id in state.isr or state.leader == broker.node_id
        ):
            broker.scrubber.withdraw(key)  # its log cannot serve: it must not be in the ISR
        revision = view.partition_revisions.get(key, 0)
        if state.leader == broker.node_id and revision < broker.fenced_below:
            if partition.fence():  # a state from before this registration: wait for a new one
                self._route(partition)
            return
        if partition.apply_state(state, revision):
            self._route(partition)

    def fence_all(self) -> None:
        """The broker lost its registration: lead nothing until elected again."""
        for partition in list(self._broker.partitions.values()):
            if partition.fence():
                self._route(partition)

    def apply_written(self, partition: Partition) -> None:
        """The partition took a state it wrote itself: follow its role."""
        self._route(partition)

    def _roles_changed(self, partition: Partition) -> None:
        coordinator = self._broker.coordinator
        if coordinator is not None and partition.topic == OFFSETS_TOPIC:
            coordinator.offsets.partition_changed(partition)
        if self._broker.queues is not None:
            self._broker.queues.partition_changed(partition)

    def _route(self, partition: Partition) -> None:
        """Hand a follower to its leader's fetcher; take anything else out of every fetcher."""
        key = (partition.topic, partition.index)
        leader = partition.state.leader if partition.state is not None else -1
        for node, existing in self.fetchers.items():
            if node != leader or partition.role is not Role.FOLLOWER:
                existing.remove(*key)
        self._roles_changed(partition)
        if partition.role is Role.FOLLOWER and not partition.repairing:
            fetcher = self.fetchers.get(leader)
            if fetcher is None:
                config = self._broker.config
                fetcher = ReplicaFetcher(
                    self._broker.node_id,
                    leader,
                    self._address_of,
                    max_wait_ms=config.replica_fetch_wait_max_ms,
                    max_bytes=config.replica_fetch_max_bytes,
                    credentials=self._broker.credentials,
                )
                self.fetchers[leader] = fetcher
            fetcher.add(partition)

    def _address_of(self, node: int) -> tuple[str, int] | None:
        info = self._broker.view.brokers.get(node)
        return None if info is None else (info.host, info.port)

    # -- opening, reconfiguring, dropping ---------------------------------------------

    def _open(self, topic: TopicRecord, index: int) -> None:
        """Queue the partition's log to open (in a worker thread, see :mod:`mq.broker.opener`)."""
        broker = self._broker
        if (topic.name, index) in self._opener:
            return  # on its way: reconciled once open
        refusal = broker.limits.refusal(len(broker.partitions) + len(self._opener), 1)
        if refusal is not None:  # the controller refuses this at creation; a reassignment
            # or a limit lowered since a restart may still ask: no file is made
            log.error(
                "%s-%d is not opened here: %s",
                topic.name,
                index,
                refusal,
                extra=partition_extra(topic.name, index),
            )
            return
        try:
            config = self._log_config(topic)
        except MQError as exc:
            log.error(
                "%s-%d stays offline here: %s",
                topic.name,
                index,
                exc,
                extra=partition_extra(topic.name, index),
            )
            broker.scrubber.open_failed(topic.name, index)
            return
        self._opener.submit(topic, index, config)

    def _log_config(self, topic: TopicRecord) -> LogConfig:
        """The log settings of ``topic``, parsed once for all its partitions."""
        cached = self._log_configs.get(topic.name)
        if cached is not None and cached[0] == topic.configs:
            return cached[1]
        config = topic_log_config(self._broker.config.log, split_topic_configs(topic.configs)[0])
        self._log_configs[topic.name] = (dict(topic.configs), config)
        return config

    def _opened(self, topic: TopicRecord, index: int, opened: OpenedLog | Exception) -> None:
        """A queued log is open (or failed to): register the partition, then reconcile it
        with the view as it is now (its topic may have gone, or come back as a new one)."""
        broker = self._broker
        key = (topic.name, index)
        if isinstance(opened, Exception):
            log.error(
                "%s-%d stays offline here: %s",
                topic.name,
                index,
                opened,
                extra=partition_extra(topic.name, index),
            )
            broker.scrubber.open_failed(topic.name, index)
            broker.view_changed()  # no longer opening: a create waiting on it answers
            return
        partition = Partition(
            topic.name,
            index,
            opened.log,
            broker.node_id,
            checkpointed=opened.high_watermark,
            thread_write_bytes=broker.config.thread_write_bytes,
            contended=broker.tenants_contended,
        )
        producer_ids.bound_log(partition.log, broker.config)  # a restart agrees with expiry
        partition.on_corrupt = broker.scrubber.report_read
        partition.on_offline = broker.scrubber.log_offline
        if broker.metrics is not None:
            partition.log.on_flush = broker.metrics.flushed
            partition.on_isr_change = broker.metrics.isr_changed
        partition.start()
        broker.partitions[key] = partition
        self._configs[topic.name] = dict(topic.configs)
        try:
            current = broker.view.topics.get(topic.name)
            if current is not None and current.topic_id != topic.topic_id:
                self._drop(key)  # opened for a topic deleted since: its files go first
            self.reconcile(key)
        finally:  # whatever reconciling did, a create waiting on this open must hear of it
            broker.view_changed()

    def _reconfigure(self, topic: TopicRecord) -> None:
        self._configs[topic.name] = dict(topic.configs)
        try:
            config = topic_log_config(
                self._broker.config.log, split_topic_configs(topic.configs)[0]
            )
        except MQError as exc:
            log.error("topic %s: bad configs %s: %s", topic.name, topic.configs, exc)
            return
        for key, partition in self._broker.partitions.items():
            if key[0] == topic.name:
                replicas = len(partition.state.replicas) if partition.state else None
                partition.min_insync_replicas = self._broker.min_insync_replicas(topic, replicas)
                partition.writer_call_nowait(lambda log_: log_.reconfigure(config))

    def _drop(self, key: Key) -> None:
        partition = self._broker.partitions.pop(key, None)
        if partition is None:
            return
        for fetcher in self.fetchers.values():
            fetcher.remove(*key)
        self._broker.cleaner.forget(partition)
        partition.role = Role.OFFLINE
        self._roles_changed(partition)
        task = asyncio.get_running_loop().create_task(self._close_and_delete(partition))
        self._dropping[key] = task
        task.add_done_callback(lambda _: self._dropping.pop(key, None))

    async def _close_and_delete(self, partition: Partition) -> None:
        try:
            await partition.close()
        except MQError as exc:
            log.warning("closing %s: %s", partition.name, exc)
        directory = partition.log.directory
        if directory.exists():
            doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex[:8]}.deleted")
            directory.rename(doomed)
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: shutil.rmtree(doomed, ignore_errors=True)
            )
        log.info(
            "removed the replica of %s here",
            partition.name,
            extra=partition_extra(partition.topic, partition.index),
        )

    def deleting(self, topic: str) -> bool:
        return any(key[0] == topic for key in self._dropping)

    async def wait_dropped(self, topic: str) -> None:
        tasks = [task for key, task in self._dropping.items() if key[0] == topic]
        await asyncio.gather(*tasks, return_exceptions=True)

    def remove_strays(self) -> None:
        """Remove partition directories the view does not assign here (at start)."""
        broker = self._broker
        if not broker.view.topics:
            return  # a new (or wiped) store, or a single node's data from an older version
        for path in broker.config.data_dir.iterdir():
            found = _PARTITION_DIR.match(path.name)
            if not path.is_dir() or found is None:
                continue
            key = (found.group(1), int(found.group(2)))
            state = broker.view.partitions.get(key)
            if key in broker.partitions or (state is not None and broker.node_id in state.replicas):
                continue
            log.warning("removing %s: not a replica of this broker", path.name)
            doomed = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.deleted")
            path.rename(doomed)
            shutil.rmtree(doomed, ignore_errors=True)

    async def wait_opened(self) -> None:
        """Until every partition queued to open is open (or failed to)."""
        await self._broker.wait_for_view(lambda: not len(self._opener), OPEN_WAIT_S)

    async def stop(self) -> None:
        await self._opener.stop()
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()))
        self.fetchers.clear()
        await asyncio.gather(*self._dropping.values(), return_exceptions=True)

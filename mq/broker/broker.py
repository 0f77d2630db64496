"""The broker's state: topics, the partitions it hosts, and their lifecycle.

Request handlers (``mq.broker.handlers_*``) ask the :class:`Broker` for a
partition by name and act on it; the server (``mq.broker.server``) owns the
sockets. Topic changes go through the catalog first (persisted), then open or
close partitions, so a crash in between is repaired at the next start.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
import uuid
from typing import TYPE_CHECKING

from mq.broker.catalog import Catalog, TopicInfo, topic_log_config
from mq.broker.config import BrokerConfig
from mq.broker.log_cleaner import LogCleaner
from mq.broker.partition import Partition
from mq.broker.producer_ids import ProducerIdAllocator
from mq.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    MQError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from mq.wire.limits import validate_topic_name

if TYPE_CHECKING:
    from mq.broker.coordinator import GroupCoordinator

log = logging.getLogger(__name__)

CLUSTER_ID = "mq-single-node"


class Broker:
    """One node's topics and partitions (the embedded default: it leads them all)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.catalog = Catalog(config.data_dir)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._lock_fd: int | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self.cleaner = LogCleaner(self.partitions, config.cleaner_backoff_ms)
        self.advertised: tuple[str, int] = (config.host, config.port)
        self.producer_ids = ProducerIdAllocator(config.data_dir)
        self.coordinator: GroupCoordinator | None = None
        self._deleting: set[str] = set()
        """Topics whose partitions are closing and files going: not to be created again yet."""
        self.served_apis: frozenset[int] = frozenset()
        """API keys the server has handlers for (what api_versions advertises)."""
        """Set by the server once the offsets topic is loaded."""

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        data = self.config.data_dir
        data.mkdir(parents=True, exist_ok=True)
        self._lock_data_dir()
        self._remove_deleted_dirs()
        self.catalog.load()
        for topic in self.catalog.topics.values():
            self._open_partitions(topic)
        self._retention_task = asyncio.get_running_loop().create_task(self._retention_loop())
        self.cleaner.start()
        log.info(
            "broker %d: %d topics from %s", self.config.node_id, len(self.catalog.topics), data
        )

    async def stop(self) -> None:
        if self._retention_task is not None:
            self._retention_task.cancel()
        await self.cleaner.stop()
        partitions = list(self.partitions.values())
        self.partitions.clear()
        results = await asyncio.gather(*(p.close() for p in partitions), return_exceptions=True)
        for partition, result in zip(partitions, results, strict=True):
            if isinstance(result, BaseException):
                log.error("closing %s failed: %s", partition.name, result)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _lock_data_dir(self) -> None:
        fd = os.open(self.config.data_dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StorageError(
                f"{self.config.data_dir} is in use by another broker (lock held)"
            ) from None
        self._lock_fd = fd

    def _remove_deleted_dirs(self) -> None:
        for path in self.config.data_dir.glob("*.deleted"):
            shutil.rmtree(path, ignore_errors=True)

    def _open_partitions(self, topic: TopicInfo) -> None:
        config = topic.log_config(self.config.log)
        for index in range(topic.partitions):
            try:
                partition = Partition.open(self.config.data_dir, topic.name, index, config)
            except StorageError as exc:
                log.error("%s-%d stays offline: %s", topic.name, index, exc)
                continue
            partition.start()
            self.partitions[(topic.name, index)] = partition

    # -- lookups ------------------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition:
        found = self.partitions.get((topic, index))
        if found is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted here")
        return found

    def topic_partitions(self, topic: str) -> list[Partition]:
        info = self.catalog.get(topic)
        if info is None:
            return []
        return [p for i in range(info.partitions) if (p := self.partitions.get((topic, i)))]

    # -- topic changes ------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 1,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
        internal: bool = False,
    ) -> TopicInfo:
        """Create a topic (``partitions``/``replication_factor`` of -1 mean the defaults)."""
        validate_topic_name(name)
        if name in self.catalog:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if name in self._deleting:
            raise TopicAlreadyExistsError(f"topic {name!r} is still being deleted")
        count = self.config.default_partitions if partitions == -1 else partitions
        if count < 1:
            raise InvalidPartitionsError(f"a topic needs at least one partition, got {count}")
        if replication_factor not in (-1, 1):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} needs more brokers: this node is alone"
            )
        configs = dict(configs or {})
        topic_log_config(self.config.log, configs)  # raises InvalidConfigError
        info = TopicInfo(name, count, configs, internal=internal)
        if not validate_only:
            self.catalog.topics[name] = info
            self.catalog.save()
            self._open_partitions(info)
            log.info("created topic %s with %d partitions", name, count)
        return info

    def ensure_topic(self, name: str) -> TopicInfo:
        """The topic, created with the defaults if auto-creation is on."""
        info = self.catalog.get(name)
        if info is not None:
            return info
        if not self.config.auto_create_topics or name in self._deleting:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return self.create_topic(name, -1)

    async def delete_topic(self, name: str) -> None:
        info = self.catalog.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if info.internal:
            raise InvalidTopicError(f"internal topic {name} cannot be deleted")
        del self.catalog.topics[name]
        self.catalog.save()
        self._deleting.add(name)  # until its files are gone: a new topic must not open them
        try:
            for index in range(info.partitions):
                partition = self.partitions.pop((name, index), None)
                if partition is not None:
                    self.cleaner.forget(partition)
                    await partition.close()
                directory = self.config.data_dir / f"{name}-{index}"
                if directory.exists():
                    doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex[:8]}.deleted")
                    directory.rename(doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
        finally:
            self._deleting.discard(name)
        log.info("deleted topic %s", name)

    async def alter_topic_configs(
        self, name: str, changes: dict[str, str | None], *, validate_only: bool = False
    ) -> None:
        """Set (or with None, reset) topic configs; partitions reopen with the new settings."""
        info = self.catalog.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        configs = dict(info.configs)
        for key, value in changes.items():
            if value is None:
                configs.pop(key, None)
            else:
                configs[key] = value
        new_config = topic_log_config(self.config.log, configs)
        if validate_only:
            return
        info.configs = configs
        self.catalog.save()
        for partition in self.topic_partitions(name):
            await partition.writer.call(lambda log_: log_.reconfigure(new_config))

    # -- retention ------------------------------------------------------------------

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.retention_check_ms / 1000)
            for partition in list(self.partitions.values()):
                try:
                    deleted = await partition.writer.call(lambda log_: log_.enforce_retention())
                except MQError as exc:
                    log.warning("retention of %s: %s", partition.name, exc)
                    continue
                if deleted:
                    log.info("retention deleted %d segments of %s", deleted, partition.name)

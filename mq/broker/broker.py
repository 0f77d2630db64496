"""The broker's state: the cluster view, the partitions it hosts, and their lifecycle.

Request handlers (``mq.broker.handlers_*``) ask the :class:`Broker` for a
partition by name and act on it; the server (``mq.broker.server``) owns the
sockets. What exists and who leads it lives in the metadata store (etcd, or
the embedded local store of the single-node default): the broker keeps a
:class:`~mq.replication.cluster_state.ClusterView` of it, current through a
watch, and its :class:`~mq.broker.replicas.ReplicaManager` makes the hosted
partitions match it (opening, leading, following, dropping). Topic changes go
to the controller (:class:`~mq.replication.controller.ControllerSeat`), here
if this broker is it, else forwarded to it; they take effect when the watch
brings them back.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from mq.broker import encryption_guard, limits, maintenance, producer_ids
from mq.broker import listeners as listener_specs
from mq.broker.audit import AuditLog
from mq.broker.catalog import (
    LegacyCatalog,
    split_topic_configs,
)
from mq.broker.config import BrokerConfig
from mq.broker.isr import IsrManager
from mq.broker.log_cleaner import LogCleaner
from mq.broker.metrics import Meters
from mq.broker.partition import Partition
from mq.broker.peers import Peers
from mq.broker.producer_ids import ProducerIdAllocator
from mq.broker.quotas import QuotaManager
from mq.broker.replicas import OPEN_WAIT_S, ReplicaManager
from mq.broker.scrubber import Scrubber
from mq.broker.topic_changes import WAIT_S, TopicChanges
from mq.errors import (
    MQError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from mq.replication.cluster_state import ClusterView, TopicRecord
from mq.replication.controller import ControllerSeat
from mq.replication.etcd_store import EtcdStore
from mq.replication.hello import BrokerCredentials, cluster_secret
from mq.replication.local_store import LocalStore
from mq.replication.membership import BrokerInfo, HttpEndpoint, NodeIdInUseError
from mq.replication.scram_store import CredentialCache
from mq.replication.store import CompactedError, Lease, MetadataStore
from mq.replication.throttle import TokenBucket
from mq.storage.keyfile import load_keyring, read_keys

if TYPE_CHECKING:
    from mq.broker.coordinator import GroupCoordinator
    from mq.broker.queues import ShareManager

INTERNAL_MIN_INSYNC = 2
"""min.insync.replicas of internal topics with 2 replicas or more (see min_insync_replicas)."""

log = logging.getLogger(__name__)

CLUSTER_ID_KEY = "/cluster_id"
METADATA_FILE = "metadata.json"
RETRY_S = 0.5
EVENTS_PER_TURN = 64
"""Metadata events applied per turn of the event loop: a topic of 1,000 partitions comes
as 1,000 events in one batch (a few hundred microseconds each to apply), which would
otherwise hold every client for that long."""
REGISTER_RETRY_S = 0.25
HANDOVER_S = 5.0
"""How long a clean shutdown waits for its leaderships to move."""


class Broker:
    """One node: its view of the cluster and the replicas it hosts."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.limits = limits.apply(config)
        """The file budget: descriptors, maps, the partitions this broker may host."""
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.keyring = (
            load_keyring(config.encryption_key_file) if config.encryption_key_file else None
        )
        """Encryption at rest (every partition's log shares it), or None."""
        self.view = ClusterView()
        self.store: MetadataStore = (
            EtcdStore.from_url(config.metadata)
            if config.metadata
            else LocalStore(config.data_dir / METADATA_FILE)
        )
        self.seat: ControllerSeat | None = None
        self.replicas = ReplicaManager(self)
        self.isr = IsrManager(self)
        self.scrubber = Scrubber(self)
        self.peers = Peers(self)
        self.client_quotas = QuotaManager(self.store, config)  # issue 20: started by Server
        self.catchup_bucket = TokenBucket(config.replication_catchup_bytes_per_s, time.monotonic())
        self.cleaner = LogCleaner(self.partitions, config.cleaner_backoff_ms)
        self.advertised: tuple[str, int] = (config.host, config.port)
        self.endpoints: list[tuple[str, str, int]] = []
        """Every listener as (name, host, port), registered with the broker (issue 19)."""
        self.http_endpoint: HttpEndpoint | None = None
        """The HTTP listener's address, registered with the broker (issue 21)."""
        self.scram_credentials = CredentialCache(self.store)
        """The users' SCRAM credentials, kept up to date from the store (issue 19)."""
        self.producer_ids = ProducerIdAllocator(self.store, config.data_dir)
        self.coordinator: GroupCoordinator | None = None
        self.queues: ShareManager | None = None
        self.cluster_id = ""
        """Made by the first broker of the cluster, kept in the metadata store."""
        self.credentials = BrokerCredentials(self.node_id, b"")
        """What this broker shows the others, and what it asks of connections that say
        they are brokers (:mod:`mq.replication.hello`); the secret is loaded at start."""
        self.metrics: Meters | None = (
            Meters(config.metrics_max_labelled) if config.http_port is not None else None
        )
        """What the broker counts for ``/metrics`` (issue 21): only with an HTTP listener."""
        self.audit = AuditLog(
            config.data_dir, config.node_id, config.audit_max_bytes, config.audit_max_files
        )
        """The audit log: ``broker.audit(ctx, operation, resource, result, **details)``."""
        self.topics = TopicChanges(self)
        """Create, delete, reconfigure topics, and catch up on new ones."""
        self.served_apis: frozenset[int] = frozenset()
        """API keys the server has handlers for (what api_versions advertises)."""
        self.tenants_contended: Callable[[], bool] = lambda: True
        """Whether more than one tenant has requests in progress (the server's dispatcher
        says): partitions' big appends are copied in a thread only then."""
        self._lock_fd: int | None = None
        self._lease: Lease | None = None
        self.broker_epoch = 0
        """This incarnation's registration revision (0: not registered, or the session
        was lost). The broker leads no partition whose state is older: the controller
        elects it again, in a new leader epoch, first."""
        self._tasks: list[asyncio.Task[None]] = []
        self._view_waiters: set[asyncio.Future[None]] = set()
        self._stopping = False

    def reload_keys(self) -> None:
        """Read the encryption key file again (SIGHUP): a key added there encrypts from now on."""
        if self.keyring is None or self.config.encryption_key_file is None:
            log.warning("SIGHUP: no encryption key file to reload")
            return
        try:
            self.keyring.replace(read_keys(self.config.encryption_key_file))
        except MQError as exc:
            log.error("SIGHUP: the encryption keys stay as they were: %s", exc)
            return
        log.info(
            "encryption keys reloaded: ids %s, %d encrypts", self.keyring.ids, self.keyring.newest
        )

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, load the view and take up the replicas it gives this node."""
        data = self.config.data_dir
        data.mkdir(parents=True, exist_ok=True)
        self._lock_data_dir()
        self._remove_deleted_dirs()
        await self.store.start()
        await encryption_guard.check(self.store, self.config)
        self.cluster_id = (
            await self.store.get_or_create(CLUSTER_ID_KEY, lambda: uuid.uuid4().hex.encode())
        ).decode()
        secret = await cluster_secret(self.store, self.config.inter_broker_secret)
        self.credentials = BrokerCredentials(
            self.node_id, secret, listener_specs.broker_security(self.config)
        )
        self.view = await ClusterView.load(self.store)
        self.replicas.reconcile_all()
        await self.replicas.wait_opened()  # the logs it hosts, opened in worker threads
        self.replicas.remove_strays()
        self.cleaner.start()

    async def join(self, advertised: tuple[str, int]) -> None:
        """Register under a lease and campaign for controller (once listening)."""
        self.advertised = advertised
        await self._register()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._follow(), name="metadata-watch"))
        partitions = self.partitions.values
        self._tasks.append(
            loop.create_task(maintenance.retention_loop(partitions, self.config), name="retention")
        )
        checkpoints = maintenance.checkpoint_loop(partitions, self.config)
        self._tasks.append(loop.create_task(checkpoints, name="hw-checkpoint"))
        self._tasks.append(loop.create_task(self._supervise_lease(), name="lease"))
        expiry = producer_ids.expire_loop(lambda: self.partitions.values(), self.config)
        self._tasks.append(loop.create_task(expiry, name="producer-expiry"))
        self.isr.start()
        self.scrubber.start()
        if self.config.metadata is None:
            await self._adopt_local()
        log.info("broker %d joined: %d topics", self.node_id, len(self.view.topics))

    async def _register(self) -> None:
        """Register under a new lease and campaign.

        A broker restarted quickly after a crash finds its previous
        registration still there until that lease expires: it waits for it (a
        session timeout at most), and only then gives up — another live broker
        has this node id.
        """
        self._lease = await self.store.grant_lease(self.config.session_timeout_ms)
        host, port = self.advertised
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.session_timeout_ms / 1000 * 1.5 + 1
        while True:
            self.seat = ControllerSeat(
                self.store,
                BrokerInfo(
                    self.node_id,
                    host,
                    port,
                    self.limits.max_partitions,
                    self.endpoints,
                    self.http_endpoint,
                ),
                self._lease,
            )
            try:
                await self.seat.start()
            except NodeIdInUseError:
                if loop.time() >= deadline:
                    raise
                log.info("node %d: waiting for the previous registration to expire", self.node_id)
                await asyncio.sleep(REGISTER_RETRY_S)
                continue
            self.broker_epoch = self.seat.broker_epoch
            log.info("broker %d registered in broker epoch %d", self.node_id, self.broker_epoch)
            self.replicas.reconcile_all()
            return

    async def _adopt_local(self) -> None:
        """Single node: be the controller, and take in a catalog from before the store."""
        assert self.seat is not None
        await asyncio.wait_for(self.seat.elected.wait(), WAIT_S)
        legacy = LegacyCatalog(self.config.data_dir)
        for topic in legacy.load():
            if topic.name not in self.view.topics:
                await self.seat.create_topic(
                    topic.name,
                    topic.partitions,
                    1,
                    topic.configs,
                    internal=topic.internal,
                    topic_id=topic.topic_id,
                )
                await self.wait_topic_ready(topic.name)
        legacy.retire()
        # a single node listens as the leader of its partitions: the controller's
        # elections (one store write each, in a worker thread) are done first
        try:
            await self.wait_for_view(lambda: all(p.is_leader for p in self.partitions.values()))
        except RequestTimedOutError:
            log.warning("node %d: some partitions still have no leader", self.node_id)

    async def stop(self) -> None:
        """Hand leaderships over (a cluster), then close every partition cleanly."""
        self._stopping = True
        if self.seat is not None:
            await self.seat.abandon()
        if self._lease is not None:
            with contextlib.suppress(MQError, OSError):
                await self.store.revoke_lease(self._lease)  # our registration goes
            if self.config.metadata is not None:
                await self._wait_handover()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.isr.stop()
        await self.scrubber.stop()
        await self.replicas.stop()
        await self.peers.close()
        await self.cleaner.stop()
        partitions = list(self.partitions.values())
        self.partitions.clear()
        results = await asyncio.gather(*(p.close() for p in partitions), return_exceptions=True)
        for partition, result in zip(partitions, results, strict=True):
            if isinstance(result, BaseException):
                log.error("closing %s failed: %s", partition.name, result)
        with contextlib.suppress(MQError, OSError):
            await self.store.close()
        self.audit.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def _wait_handover(self) -> None:
        """Until no partition with another live replica is led here (bounded)."""

        def handed_over() -> bool:
            for state in self.view.partitions.values():
                if state.leader == self.node_id and any(
                    r != self.node_id and r in self.view.brokers for r in state.isr
                ):
                    return False
            return True

        with contextlib.suppress(TimeoutError, RequestTimedOutError):
            await self.wait_for_view(handed_over, HANDOVER_S)

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

    # -- the view -------------------------------------------------------------------

    async def _follow(self) -> None:
        """Apply every change of the metadata store, for as long as the broker runs."""
        while True:
            try:
                applied = 0
                async for event in self.view.follow(self.store):
                    self.replicas.on_event(event)
                    self._wake_view_waiters()
                    applied += 1
                    if not applied % EVENTS_PER_TURN:
                        await asyncio.sleep(0)  # a big change's events: others get a turn
            except CompactedError:
                log.warning("broker %d: metadata watch fell behind; reloading", self.node_id)
            except MQError as exc:
                log.warning("broker %d: metadata watch: %s", self.node_id, exc)
                await asyncio.sleep(RETRY_S)
            except Exception:  # a bug must not stop the view for good: log, reload
                log.exception("broker %d: metadata watch failed", self.node_id)
                await asyncio.sleep(RETRY_S)
            try:
                self.view = await ClusterView.load(self.store)
            except MQError as exc:
                log.warning("broker %d: reloading metadata: %s", self.node_id, exc)
                await asyncio.sleep(RETRY_S)
                continue
            self.replicas.reconcile_all()
            self._wake_view_waiters()

    async def _supervise_lease(self) -> None:
        """Register again after losing the lease (the store was out of reach too long)."""
        while True:
            assert self._lease is not None
            await self._lease.lost.wait()
            if self._stopping:
                return
            log.error("broker %d lost its registration lease; registering again", self.node_id)
            self.broker_epoch = 0
            self.replicas.fence_all()  # another broker may be elected to lead them meanwhile
            if self.seat is not None:
                await self.seat.abandon()
            while True:
                try:
                    await self._register()
                    break
                except MQError as exc:
                    log.warning("broker %d: registering: %s", self.node_id, exc)
                    await asyncio.sleep(RETRY_S)

    def view_changed(self) -> None:
        """Something :meth:`wait_for_view` conditions read changed (a partition opened)."""
        self._wake_view_waiters()

    async def wait_topic_ready(self, name: str) -> None:
        """Until the view has topic ``name`` and its partitions here are open (their
        logs open in worker threads, see :mod:`mq.broker.opener`)."""
        await self.wait_for_view(partial(self._has_topic, name))
        await self.wait_for_view(lambda: not self.replicas.opening(name), OPEN_WAIT_S)

    def _wake_view_waiters(self) -> None:
        waiters, self._view_waiters = self._view_waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for_view(self, ready: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        """Until ``ready()`` holds of the view; RequestTimedOutError after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not ready():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimedOutError("the cluster metadata did not show the change in time")
            waiter = loop.create_future()
            self._view_waiters.add(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                continue

    def _has_topic(self, name: str) -> bool:
        return name in self.view.topics

    @property
    def fenced_below(self) -> int:
        """States written below this revision make this broker lead nothing: its broker
        epoch (everything while it is not registered)."""
        return self.broker_epoch if self.broker_epoch else sys.maxsize

    @property
    def is_controller(self) -> bool:
        return self.seat is not None and self.seat.controller is not None

    # -- lookups ------------------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition:
        found = self.partitions.get((topic, index))
        if found is None:
            if (topic, index) in self.view.partitions:
                raise _not_here(topic, index)
            raise UnknownTopicOrPartitionError(f"{topic}-{index} does not exist")
        return found

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it (NOT_LEADER_OR_FOLLOWER otherwise)."""
        partition = self.partition(topic, index)
        partition.require_leader(current_leader_epoch)
        return partition

    def topic(self, name: str) -> TopicRecord | None:
        return self.view.topics.get(name)

    def live_brokers(self) -> dict[int, BrokerInfo]:
        return self.view.brokers

    def min_insync_replicas(self, topic: TopicRecord, replicas: int | None = None) -> int:
        """The topic's ``min.insync.replicas``: its config, else the broker's default.

        Internal topics (committed offsets, share state) default to 2 when they
        have 2 replicas or more: with 1, an ``acks=all`` save is done once the
        leader alone has it whenever the ISR has shrunk to the leader (a busy
        follower), and killing that leader loses an acknowledged ack.
        """
        _, replication = split_topic_configs(topic.configs)
        value = replication.get("min.insync.replicas")
        if value is not None:
            return int(value)
        if topic.internal and replicas is not None:
            return max(self.config.min_insync_replicas, min(INTERNAL_MIN_INSYNC, replicas))
        return self.config.min_insync_replicas


def _not_here(topic: str, index: int) -> MQError:
    return NotLeaderOrFollowerError(f"{topic}-{index} has no replica on this broker")


__all__ = ["Broker"]

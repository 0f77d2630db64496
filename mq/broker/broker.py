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
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from mq.broker import encryption_guard, limits, maintenance, producer_ids
from mq.broker import listeners as listener_specs
from mq.broker.audit import AuditLog
from mq.broker.catalog import (
    INTERNAL_TOPICS,
    LegacyCatalog,
    split_topic_configs,
    topic_log_config,
)
from mq.broker.config import BrokerConfig
from mq.broker.isr import IsrManager
from mq.broker.log_cleaner import LogCleaner
from mq.broker.metrics import Meters
from mq.broker.pacing import Pacer
from mq.broker.partition import Partition
from mq.broker.peers import Peers
from mq.broker.producer_ids import ProducerIdAllocator
from mq.broker.quotas import QuotaManager
from mq.broker.replicas import OPEN_WAIT_S, ReplicaManager
from mq.broker.scrubber import Scrubber
from mq.broker.topic_configs import altered_configs, broker_count, check_min_insync
from mq.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    MQError,
    NotControllerError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    StorageError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from mq.replication.cluster_state import ClusterView, TopicRecord, topic_key
from mq.replication.controller import ControllerSeat
from mq.replication.etcd_store import EtcdStore
from mq.replication.hello import BrokerCredentials, cluster_secret
from mq.replication.local_store import LocalStore
from mq.replication.membership import BrokerInfo, HttpEndpoint, NodeIdInUseError
from mq.replication.scram_store import CredentialCache
from mq.replication.store import CompactedError, Lease, MetadataStore
from mq.replication.throttle import TokenBucket
from mq.storage.keyfile import load_keyring, read_keys
from mq.wire.apis_core import CREATE_TOPICS, CreateTopicsResponse
from mq.wire.limits import validate_topic_name

if TYPE_CHECKING:
    from mq.broker.coordinator import GroupCoordinator
    from mq.broker.queues import ShareManager

INTERNAL_MIN_INSYNC = 2
"""min.insync.replicas of internal topics with 2 replicas or more (see min_insync_replicas)."""

log = logging.getLogger(__name__)

CLUSTER_ID_KEY = "/cluster_id"
METADATA_FILE = "metadata.json"
WAIT_S = 10.0
"""How long a topic change waits for the view to show it."""
RETRY_S = 0.5
EVENTS_PER_TURN = 64
"""Metadata events applied per turn of the event loop: a topic of 1,000 partitions comes
as 1,000 events in one batch (a few hundred microseconds each to apply), which would
otherwise hold every client for that long."""
REGISTER_RETRY_S = 0.25
HANDOVER_S = 5.0
"""How long a clean shutdown waits for its leaderships to move."""


CATCH_UP_CHUNK = 2_048
"""Names :meth:`Broker.catch_up_on_many` looks up per turn of the loop: well under a
millisecond of dictionary work, so a 100,000-name metadata request gives ~50 turns."""


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
                await self._wait_topic_ready(topic.name)
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

    async def _wait_topic_ready(self, name: str) -> None:
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

    # -- topic changes ------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
        internal: bool = False,
        cap_to_live: bool = False,
    ) -> TopicRecord:
        """Create a topic on the controller (``partitions``/``replication_factor`` of -1:
        the defaults); returns once this broker's view has it.

        ``cap_to_live``: fewer replicas if fewer brokers are alive (auto-created and
        internal topics), rather than INVALID_REPLICATION_FACTOR.
        """
        validate_topic_name(name)
        if name in self.view.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if self.replicas.deleting(name):
            raise TopicAlreadyExistsError(f"topic {name!r} is still being deleted")
        count = self.config.default_partitions if partitions == -1 else partitions
        if count < 1:
            raise InvalidPartitionsError(f"a topic needs at least one partition, got {count}")
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        if replication_factor < 1:
            raise InvalidReplicationFactorError(
                f"replication factor must be >= 1, got {replication_factor}"
            )
        configs = dict(configs or {})
        topic_log_config(self.config.log, configs)  # raises InvalidConfigError
        if "min.insync.replicas" in configs:
            check_min_insync(configs, await broker_count(self.store, self.node_id))
        seat = self._controller_seat()
        record = await seat.create_topic(
            name,
            count,
            -replication_factor if cap_to_live else replication_factor,
            configs,
            internal=internal,
            validate_only=validate_only,
        )
        if not validate_only:
            await self._wait_topic_ready(name)
            log.info("created topic %s with %d partitions", name, count)
        return record

    async def catch_up_on(self, name: str) -> TopicRecord | None:
        """A topic this broker's view does not have yet, if the store has it.

        Another broker may just have created it (the watch brings it a moment
        later): one read of the store, then a bounded wait for the view to
        reach that revision, so a client sees its own topic wherever it asks.
        """
        found = self.view.topics.get(name)
        if found is not None:
            return found
        entry = await self.store.get(topic_key(name))
        if entry is None:
            return None
        revision = entry.mod_revision
        with contextlib.suppress(RequestTimedOutError):
            await self.wait_for_view(lambda: self.view.revision >= revision, WAIT_S / 2)
        return self.view.topics.get(name)

    async def catch_up_on_many(self, names: list[str]) -> dict[str, TopicRecord]:
        """:meth:`catch_up_on` for many names: the topics this broker's view lacks but the
        store has, read a chunk of :data:`CATCH_UP_CHUNK` names per turn of the loop (a
        metadata request may name 100,000 topics that do not exist: one read of the
        store each held everyone else: issue 18), then one bounded wait for the view
        to reach the newest of them."""
        topics = self.view.topics
        found: dict[str, int] = {}
        for start in range(0, len(names), CATCH_UP_CHUNK):
            if start:
                await asyncio.sleep(0)
            chunk = names[start : start + CATCH_UP_CHUNK]
            keys = {topic_key(name): name for name in chunk if name not in topics}
            if keys:
                entries = await self.store.get_many(keys)
                found.update((keys[key], entry.mod_revision) for key, entry in entries.items())
        if not found:
            return {}
        revision = max(found.values())
        with contextlib.suppress(RequestTimedOutError):
            await self.wait_for_view(lambda: self.view.revision >= revision, WAIT_S / 2)
        topics = self.view.topics
        return {name: topics[name] for name in found if name in topics}

    async def ensure_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        *,
        internal: bool = False,
    ) -> TopicRecord:
        """The topic, created (on the controller, with fewer replicas if fewer brokers
        live) if it does not exist: user topics only if auto-creation is on."""
        found = await self.catch_up_on(name)
        if found is not None:
            return found
        if name in INTERNAL_TOPICS and not internal:  # a client's produce or metadata
            raise TopicAuthorizationFailedError(f"only the brokers may create {name}")
        if (not internal and not self.config.auto_create_topics) or self.replicas.deleting(name):
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        validate_topic_name(name)
        configs = dict(configs or {})

        async def create_here() -> CreateTopicsResponse:
            with contextlib.suppress(TopicAlreadyExistsError):
                await self.create_topic(
                    name,
                    partitions,
                    replication_factor,
                    configs,
                    internal=internal,
                    cap_to_live=True,
                )
            return CreateTopicsResponse(topics=[])

        body = {
            "topics": [
                {
                    "name": name,
                    "partitions": partitions,
                    "replication_factor": replication_factor,
                    "configs": configs,
                }
            ],
            "timeout_ms": int(WAIT_S * 1000),
            "validate_only": False,
        }
        response = await self.peers.call_controller(CREATE_TOPICS, body, create_here)
        for topic in response["topics"]:
            if topic["error"] and topic["error"] != TopicAlreadyExistsError.code:
                raise _error(topic["error"], topic.get("message"))
        await self._wait_topic_ready(name)
        found = self.view.topics.get(name)
        if found is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return found

    async def delete_topic(self, name: str) -> None:
        info = self.view.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if info.internal:
            raise InvalidTopicError(f"internal topic {name} cannot be deleted")
        await self._controller_seat().delete_topic(name)
        await self.wait_for_view(lambda: name not in self.view.topics)
        await self.replicas.wait_dropped(name)
        log.info("deleted topic %s", name)

    async def alter_topics_configs(
        self, changes: Mapping[str, Mapping[str, str | None]], *, validate_only: bool = False
    ) -> dict[str, MQError]:
        """Set (or with None, reset) configs of several topics; the topics that failed.

        Every topic's changes are checked first; the valid ones are then written
        together (one store transaction, see
        :func:`~mq.replication.cluster_state.update_topics_configs`), so a request
        naming many topics writes the metadata once, not once per topic.
        """
        failures: dict[str, MQError] = {}
        updated: dict[str, dict[str, str]] = {}
        brokers = await broker_count(self.store, self.node_id) if changes else 0
        pacer = Pacer()
        for name, change in changes.items():
            if pacer.due():  # up to 100,000 topics: other clients get turns
                await asyncio.sleep(0)
            try:
                info = self.view.topics.get(name)
                updated[name] = altered_configs(name, info, change, self.config.log, brokers)
            except MQError as exc:
                failures[name] = exc
        if validate_only or not updated:
            return failures
        try:
            failures.update(await self._controller_seat().alter_topics_configs(updated))
        except MQError as exc:
            return failures | dict.fromkeys(updated, exc)
        waiting = {name: configs for name, configs in updated.items() if name not in failures}

        def shown() -> bool:  # each topic checked until it shows: linear in all, not per wake
            for name in list(waiting):
                topic = self.view.topics.get(name)
                if topic is not None and topic.configs != waiting[name]:
                    return False
                del waiting[name]
            return True

        await self.wait_for_view(shown)
        return failures

    def _controller_seat(self) -> ControllerSeat:
        if self.seat is None or self.seat.controller is None:
            raise NotControllerError(f"broker {self.node_id} is not the controller")
        return self.seat


def _not_here(topic: str, index: int) -> MQError:
    return NotLeaderOrFollowerError(f"{topic}-{index} has no replica on this broker")


def _error(code: int, message: Any) -> MQError:
    return error_for_code(code)(message or "")


__all__ = ["Broker"]

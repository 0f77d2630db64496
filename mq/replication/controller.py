"""The controller: one broker at a time assigns replicas and moves leadership.

Every broker runs a :class:`ControllerSeat`. It registers the broker (under
the broker's lease) and campaigns for ``/controller``; the winner *leads*:

* it loads the cluster (:class:`~mq.replication.cluster_state.ClusterView`)
  and the live brokers, and watches both from that revision;
* when a broker's registration disappears (its lease expired: it crashed, hung
  or lost etcd), every partition it led gets a new leader from the live ISR
  (:func:`~mq.replication.placement.elect_leader`, unclean only where the
  topic allows it), with a new leader epoch; the dead broker also leaves the
  ISR of the partitions it followed;
* when a broker registers, partitions left offline are elected again (a
  returning ISR member can lead them). Each registration is a new **broker
  epoch** (its revision): a partition whose leader registered after its state was
  written (the leader restarted, or lost its session, before the controller saw it
  go) gets a new leader epoch, from another live ISR member if there is one
  (:func:`after_restart`); the broker itself leads nothing written before its
  registration (:mod:`mq.broker.replicas`), so it is fenced until then;
* it creates and deletes topics (placement over the live brokers) and changes
  their configs;
* it reassigns partitions and elects preferred leaders on request
  (:mod:`~mq.replication.reassignment`); a reassignment ends when the watch
  shows the leader has added every new replica to the ISR.

Each write is fenced by the controller epoch and compared against the
revision read, so a controller that lost its seat (a long pause, a network
split from etcd) can no longer change anything; it notices through
:class:`~mq.errors.NotControllerError` or the loss of its lease, and goes
back to campaigning. The other seats wait for ``/controller`` to disappear and
campaign then.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from functools import partial

from mq.errors import (
    MQError,
    NotControllerError,
    PolicyViolationError,
    UnknownTopicOrPartitionError,
)
from mq.replication import cluster_state, membership, reassignment
from mq.replication.cluster_state import ClusterView, TopicRecord
from mq.replication.membership import (
    BROKERS,
    CONTROLLER,
    BrokerInfo,
    Controller,
    current_controller,
)
from mq.replication.placement import (
    NO_LEADER,
    PartitionState,
    TopicPartitionKey,
    assign_replicas,
    elect_leader,
    over_capacity,
    replica_counts,
)
from mq.replication.store import CompactedError, EventKind, Lease, MetadataStore

log = logging.getLogger(__name__)

UNCLEAN_ELECTION = "unclean.leader.election.enable"
RETRY_S = 0.5
"""Pause before campaigning again after an error of the store."""
STOP_TIMEOUT_S = 2.0
ELECTION_BATCH = 100
"""Partition states an election writes per store transaction: a broker restarting
with 10,000 partitions is re-elected in 100 commits, not 10,000 (each of which
rewrites the embedded store's whole file). Under etcd's default ``--max-txn-ops``
of 128."""


class ControllerSeat:
    """One broker's part in controller election, and the controller's work when it wins."""

    def __init__(self, store: MetadataStore, info: BrokerInfo, lease: Lease) -> None:
        self._store = store
        self.info = info
        self._lease = lease
        self.controller: Controller | None = None
        """Set while this broker is the controller."""
        self.broker_epoch = 0
        """The revision of this seat's registration, once registered (0 before)."""
        self.elected = asyncio.Event()
        """Set each time this broker becomes the controller (tests and status)."""
        self._task: asyncio.Task[None] | None = None
        self._live: set[int] = set()
        self._view = ClusterView()

    async def start(self) -> None:
        """Register this broker, then campaign in the background."""
        self.broker_epoch = await membership.register(self._store, self.info, self._lease)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-seat-{self.info.node_id}"
        )

    async def stop(self) -> None:
        """Stop campaigning; a sitting controller resigns so another takes over at once."""
        sitting = self.controller
        await self.abandon()
        if sitting is not None:
            with contextlib.suppress(MQError):
                await membership.resign(self._store, sitting)

    async def abandon(self) -> None:
        """Stop the seat's task without resigning (what a crash leaves behind).

        Cancels until the task ends: a gRPC call that completes as it is
        cancelled can swallow one cancellation.
        """
        task, self._task = self._task, None
        if task is None:
            return
        for _ in range(int(STOP_TIMEOUT_S / 0.1)):
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=0.1)
            if done:
                return
        log.warning("node %d: the controller seat did not stop in time", self.info.node_id)

    # -- campaigning ----------------------------------------------------------------

    async def _run(self) -> None:
        while not self._lease.lost.is_set() and not _stopping():
            try:
                won = await membership.campaign(self._store, self.info.node_id, self._lease)
                if won is None:
                    sitting = await current_controller(self._store)
                    if sitting is None or sitting.node_id != self.info.node_id:
                        await self._wait_for_vacancy()
                        continue
                    won = sitting  # still ours after an error while leading: lead again
                self.controller = won
                log.info("node %d is the controller (epoch %d)", won.node_id, won.epoch)
                self.elected.set()
                await self._lead(won)
            except (MQError, CompactedError) as exc:
                if _stopping():
                    raise  # whatever the store made of the cancellation
                log.warning("controller seat of node %d: %s", self.info.node_id, exc)
                await asyncio.sleep(RETRY_S)
            finally:
                self.controller = None
                self.elected.clear()

    async def _wait_for_vacancy(self) -> None:
        entry = await self._store.get(CONTROLLER)
        _checkpoint()
        if entry is None:
            return
        async with contextlib.aclosing(self._store.watch(CONTROLLER, entry.mod_revision)) as events:
            async for event in events:
                if event.kind is EventKind.DELETE:
                    return

    # -- leading ----------------------------------------------------------------------

    async def _lead(self, controller: Controller) -> None:
        self._view = await ClusterView.load(self._store)
        brokers, _ = await membership.live_brokers(self._store)
        self._live = set(brokers)
        await self._elect_all(controller)
        write = partial(self._write_partition, controller)
        await reassignment.finish_all(self._view, write)
        _checkpoint()
        lost = asyncio.ensure_future(self._lease.lost.wait())
        events = self._view.follow(self._store)
        try:
            async for event in events:
                if lost.done() or _stopping():
                    return
                if event.key == CONTROLLER and event.kind is EventKind.DELETE:
                    return  # our lease ended: campaign again
                moved = cluster_state.partition_at(event.key)
                if moved is not None:  # an ISR the leader grew may end a reassignment
                    await reassignment.finish(self._view, moved, write)
                    continue
                if not event.key.startswith(BROKERS):
                    continue
                node = int(event.key[len(BROKERS) :])
                if event.kind is EventKind.DELETE:
                    log.info("controller: broker %d is gone", node)
                    self._live.discard(node)
                else:
                    self._live.add(node)
                await self._elect_all(controller)
        except NotControllerError:
            log.warning("node %d was fenced off as controller", self.info.node_id)
        finally:
            lost.cancel()
            await events.aclose()

    async def _elect_all(self, controller: Controller) -> None:
        """Give every partition whose leader or ISR member is gone its new state."""
        live = frozenset(self._live)
        view = self._view
        pending: list[
            tuple[str, int, PartitionState, int, Callable[[PartitionState], PartitionState]]
        ] = []
        for (topic, index), state in sorted(view.partitions.items()):
            info = view.topics.get(topic)
            unclean = info is not None and info.configs.get(UNCLEAN_ELECTION) == "true"
            change = partial(after_change, live=live, unclean=unclean)
            revision = view.partition_revisions.get((topic, index), 0)
            if state.leader in live and revision < view.broker_epochs.get(state.leader, 0):
                log.info(
                    "controller: %s-%d: leader %d registered again since epoch %d",
                    topic,
                    index,
                    state.leader,
                    state.leader_epoch,
                )
                change = partial(after_restart, seen=state, live=live)
            wanted = change(state)
            if wanted != state:
                pending.append((topic, index, wanted, revision, change))
        for start in range(0, len(pending), ELECTION_BATCH):
            chunk = pending[start : start + ELECTION_BATCH]
            updates = [(topic, index, wanted, rev) for topic, index, wanted, rev, _ in chunk]
            if await cluster_state.update_partitions(self._store, controller, updates):
                for topic, index, wanted, _, _ in chunk:
                    log.info("controller: %s-%d is now %s", topic, index, wanted)
                continue
            for topic, index, _, _, each in chunk:  # one changed meanwhile: one by one
                await self._write_partition(controller, topic, index, each)

    async def _write_partition(
        self,
        controller: Controller,
        topic: str,
        index: int,
        change: Callable[[PartitionState], PartitionState],
    ) -> PartitionState | None:
        """Compare-and-swap a partition's state, re-reading when it changed meanwhile.

        The state stored afterwards; None if the partition no longer exists.
        The view learns of the write through the watch, never ahead of it: a
        request writing here (a reassignment) must not show the election loop
        a partition newer than the live brokers it has seen so far.
        """
        for _ in range(10):
            found = await cluster_state.read_partition(self._store, topic, index)
            if found is None:
                return None  # the topic went
            state, revision = found
            wanted = change(state)
            if wanted == state:
                return state
            if await cluster_state.update_partition(
                self._store, controller, topic, index, wanted, revision
            ):
                log.info("controller: %s-%d is now %s", topic, index, wanted)
                return wanted
        raise MQError(f"{topic}-{index} keeps changing under the controller")

    # -- topic changes (on the controller) --------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
        topic_id: str | None = None,
        validate_only: bool = False,
    ) -> TopicRecord:
        """Place and write a new topic over the live brokers.

        A negative ``replication_factor`` ``-n`` asks for ``n`` replicas or as many
        as there are live brokers if fewer (internal topics on a small cluster).
        """
        controller = self._require_controller()
        live, _ = await membership.live_brokers(self._store)  # fresher than the watch
        if replication_factor < 0:
            replication_factor = max(1, min(len(live), -replication_factor))
        replicas = assign_replicas(live, partitions, replication_factor)
        refusal = over_capacity(
            {node: info.max_partitions for node, info in live.items()},
            replica_counts(state.replicas for state in self._view.partitions.values()),
            replicas,
        )
        if refusal is not None:  # before anything is written: no broker makes a file
            raise PolicyViolationError(f"topic {name!r} refused: {refusal}")
        topic = TopicRecord(name, topic_id or uuid.uuid4().hex, partitions, dict(configs), internal)
        if validate_only:
            return topic
        states = [PartitionState.new(r) for r in replicas]
        await cluster_state.create_topic(self._store, controller, topic, states)
        return topic

    async def delete_topic(self, name: str) -> None:
        await cluster_state.delete_topic(self._store, self._require_controller(), name)

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a topic's configs with ``configs`` (validated by the caller)."""
        await cluster_state.update_topic_configs(
            self._store, self._require_controller(), name, configs
        )

    async def alter_topics_configs(
        self, configs: Mapping[str, Mapping[str, str]]
    ) -> dict[str, UnknownTopicOrPartitionError]:
        """Replace several topics' configs together (one store transaction per
        :data:`~mq.replication.cluster_state.TXN_MAX_TOPICS`); the topics that failed."""
        _, failures = await cluster_state.update_topics_configs(
            self._store, self._require_controller(), configs
        )
        return failures

    # -- reassignment and preferred leaders (on the controller) -----------------------

    async def reassign_partitions(
        self, moves: Mapping[TopicPartitionKey, Sequence[int] | None]
    ) -> reassignment.Results:
        """Start a reassignment to each target (None: cancel); per partition, None or
        the error (:func:`~mq.replication.reassignment.reassign`)."""
        controller = self._require_controller()
        live, _ = await membership.live_brokers(self._store)  # fresher than the watch
        write = partial(self._write_partition, controller)
        refused = self._over_capacity(live, moves)
        allowed = {key: target for key, target in moves.items() if key not in refused}
        return refused | await reassignment.reassign(set(live), allowed, write)

    def _over_capacity(
        self,
        live: Mapping[int, membership.BrokerInfo],
        moves: Mapping[TopicPartitionKey, Sequence[int] | None],
    ) -> reassignment.Results:
        """Moves that would take a broker past the partitions it may host, refused
        with POLICY_VIOLATION (the others count as accepted, in key order)."""
        limits = {node: info.max_partitions for node, info in live.items()}
        hosted = replica_counts(state.replicas for state in self._view.partitions.values())
        refused: reassignment.Results = {}
        for key in sorted(moves):
            target, state = moves[key], self._view.partitions.get(key)
            if target is None or state is None:
                continue
            new = tuple(node for node in target if node not in state.replicas)
            refusal = over_capacity(limits, hosted, [new])
            if refusal is not None:
                refused[key] = PolicyViolationError(f"{key[0]}-{key[1]}: {refusal}")
            else:
                hosted.update(new)
        return refused

    async def elect_preferred_leaders(
        self, partitions: Iterable[TopicPartitionKey] | None = None
    ) -> reassignment.Results:
        """Lead each partition (None: each not led so) by its preferred leader if it is
        live and in sync (:func:`~mq.replication.reassignment.elect_preferred`)."""
        controller = self._require_controller()
        fresh = await ClusterView.load(self._store)  # the watch may not have caught up
        write = partial(self._write_partition, controller)
        return await reassignment.elect_preferred(
            fresh.partitions, set(fresh.brokers), partitions, write
        )

    def list_reassignments(self) -> dict[TopicPartitionKey, PartitionState]:
        """The partitions with a reassignment in progress, as the controller sees them."""
        self._require_controller()
        return reassignment.in_progress(self._view)

    def _require_controller(self) -> Controller:
        if self.controller is None:
            raise NotControllerError(f"node {self.info.node_id} is not the controller")
        return self.controller

    def partition(self, topic: str, index: int) -> PartitionState:
        """The controller's view of a partition (raises if unknown)."""
        state = self._view.partitions.get((topic, index))
        if state is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{index} is unknown")
        return state


def after_change(state: PartitionState, live: Set[int], *, unclean: bool) -> PartitionState:
    """A partition's state once the live brokers are ``live``.

    A new leader if its leader is gone (:func:`elect_leader`), and no dead
    follower left in the ISR (the leader adds it back once it has caught up).
    """
    wanted = elect_leader(state, live, unclean=unclean)
    if wanted.leader == NO_LEADER:
        return wanted
    isr = tuple(r for r in wanted.isr if r in live)
    return wanted._replace(isr=isr)


def after_restart(state: PartitionState, *, seen: PartitionState, live: Set[int]) -> PartitionState:
    """A partition's state once its leader registered again after ``seen`` was written
    (unchanged if it changed meanwhile): it must not go on in that leader epoch.

    Another live ISR member leads, as if the leader had been seen to go (it rejoins
    the ISR once caught up); with none, the leader leads again in a new epoch, with
    the live ISR members.
    """
    if (state.leader, state.leader_epoch) != (seen.leader, seen.leader_epoch):
        return state
    moved = elect_leader(state, set(live) - {state.leader})
    if moved.leader != NO_LEADER:
        return moved
    isr = tuple(r for r in state.isr if r in live) or (state.leader,)
    return state._replace(leader_epoch=state.leader_epoch + 1, isr=isr)


def _stopping() -> bool:
    """Whether the current task is being cancelled.

    A gRPC call that completes as it is cancelled can return normally and
    swallow the cancellation; the seat checks before every wait, or it would
    wait on forever after :meth:`ControllerSeat.stop`.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _checkpoint() -> None:
    if _stopping():
        raise asyncio.CancelledError

"""Topics and partition states in the metadata store, and the cache brokers keep of them.

Keys (values msgpack):

* ``/topics/<name>``: ``[topic_id, partitions, configs, internal]``;
* ``/partitions/<name>/<index>``: ``[replicas, leader, leader_epoch, isr]``, with
  ``adding, removing`` after them while a reassignment is in progress (a state
  without them reads as none in progress).

The controller writes them, each write fenced by its epoch
(:func:`~mq.replication.membership.fence`) and, for a partition, compared
against the revision it read (compare-and-swap), so two controllers, or a
controller and a stale copy of itself, can never both win. The one other
writer is a partition's leader changing its ISR (:func:`alter_isr`): compared
against the revision read and refused unless the state still names it leader
in the same epoch, so it can never undo an election.

:class:`ClusterView` is what a broker answers metadata from: loaded with one
read and kept current by a watch from that read's revision, so it misses
nothing and needs no polling.

Thread safety: one event loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field

import msgpack

from mq.errors import NotControllerError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from mq.replication.membership import (
    BROKERS,
    CONTROLLER,
    BrokerInfo,
    Controller,
    current_controller,
    fence,
)
from mq.replication.placement import PartitionState
from mq.replication.store import (
    Compare,
    Delete,
    EventKind,
    MetadataStore,
    Operation,
    Put,
    WatchEvent,
)

TOPICS = "/topics/"
PARTITIONS = "/partitions/"


@dataclass(frozen=True)
class TopicRecord:
    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


def topic_key(name: str) -> str:
    return f"{TOPICS}{name}"


def partition_key(topic: str, index: int) -> str:
    return f"{PARTITIONS}{topic}/{index}"


def _pack_topic(topic: TopicRecord) -> bytes:
    return msgpack.packb([topic.topic_id, topic.partitions, topic.configs, topic.internal])


def _unpack_topic(name: str, raw: bytes) -> TopicRecord:
    topic_id, partitions, configs, internal = msgpack.unpackb(raw)
    return TopicRecord(name, topic_id, partitions, configs, internal)


def _pack_state(state: PartitionState) -> bytes:
    fields = [list(state.replicas), state.leader, state.leader_epoch, list(state.isr)]
    if state.reassigning:
        fields += [list(state.adding), list(state.removing)]
    return msgpack.packb(fields)


def _unpack_state(raw: bytes) -> PartitionState:
    replicas, leader, epoch, isr, *reassignment = msgpack.unpackb(raw)
    adding, removing = reassignment or ([], [])
    return PartitionState(
        tuple(replicas), leader, epoch, tuple(isr), tuple(adding), tuple(removing)
    )


async def _refused(store: MetadataStore, controller: Controller) -> None:
    """Raise NotControllerError if ``controller`` was fenced off (the usual reason)."""
    if await current_controller(store) != controller:
        raise NotControllerError(f"node {controller.node_id} is no longer the controller")


async def create_topic(
    store: MetadataStore,
    controller: Controller,
    topic: TopicRecord,
    states: list[PartitionState],
) -> int:
    """Write a new topic and its partitions at once; the revision."""
    if len(states) != topic.partitions:
        raise ValueError(f"{topic.partitions} partitions but {len(states)} states")
    ops: list[Operation] = [Put(topic_key(topic.name), _pack_topic(topic))]
    ops += [Put(partition_key(topic.name, i), _pack_state(s)) for i, s in enumerate(states)]
    revision = await store.commit([fence(controller), Compare(topic_key(topic.name), 0)], ops)
    if revision is None:
        await _refused(store, controller)
        raise TopicAlreadyExistsError(f"topic {topic.name!r} already exists")
    return revision


async def delete_topic(store: MetadataStore, controller: Controller, name: str) -> int:
    """Remove a topic and its partition states; the revision."""
    entry = await store.get(topic_key(name))
    if entry is None:
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    topic = _unpack_topic(name, entry.value)
    ops: list[Operation] = [Delete(topic_key(name))]
    ops += [Delete(partition_key(name, i)) for i in range(topic.partitions)]
    guards = [fence(controller), Compare(topic_key(name), entry.mod_revision)]
    revision = await store.commit(guards, ops)
    if revision is None:
        await _refused(store, controller)
        raise UnknownTopicOrPartitionError(f"topic {name!r} changed while it was being deleted")
    return revision


async def read_partition(
    store: MetadataStore, topic: str, index: int
) -> tuple[PartitionState, int] | None:
    """A partition's state and the revision to compare against when changing it."""
    entry = await store.get(partition_key(topic, index))
    return None if entry is None else (_unpack_state(entry.value), entry.mod_revision)


async def update_partitions(
    store: MetadataStore,
    controller: Controller,
    updates: list[tuple[str, int, PartitionState, int]],
) -> int | None:
    """Compare-and-swap several partitions' states at once (``(topic, index, state,
    expected revision)`` each): the revision, or None if any changed meanwhile (then
    nothing is written). Raises NotControllerError if the controller was fenced off.
    """
    guards = [fence(controller)]
    guards += [Compare(partition_key(t, i), expected) for t, i, _, expected in updates]
    ops: list[Operation] = [Put(partition_key(t, i), _pack_state(s)) for t, i, s, _ in updates]
    revision = await store.commit(guards, ops)
    if revision is None:
        await _refused(store, controller)
    return revision


async def update_partition(
    store: MetadataStore,
    controller: Controller,
    topic: str,
    index: int,
    state: PartitionState,
    expected_revision: int,
) -> int | None:
    """Compare-and-swap a partition's state: the revision, or None if it changed meanwhile.

    Raises NotControllerError if the controller was fenced off.
    """
    key = partition_key(topic, index)
    guards = [fence(controller), Compare(key, expected_revision)]
    revision = await store.commit(guards, [Put(key, _pack_state(state))])
    if revision is None:
        await _refused(store, controller)
    return revision


@dataclass
class ClusterView:
    """Topics, partition states, live brokers and the controller as of :attr:`revision`.

    A broker's metadata cache. :attr:`partition_revisions` holds the revision
    that last wrote each partition state, so a component that wrote a state
    itself (a leader changing its ISR) can tell a newer state from an older one.
    """

    topics: dict[str, TopicRecord] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    partition_revisions: dict[tuple[str, int], int] = field(default_factory=dict)
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    """Each live broker's **broker epoch**: the revision that registered it (a new one
    at every start, and after a lost session)."""
    controller: Controller | None = None
    revision: int = 0

    @classmethod
    async def load(cls, store: MetadataStore) -> ClusterView:
        """One consistent read of everything (a single revision)."""
        entries, revision = await store.get_prefix("/")
        view = cls(revision=revision)
        for entry in entries:
            view.apply(WatchEvent(EventKind.PUT, entry.key, entry.value, entry.mod_revision))
        view.revision = revision
        return view

    def apply(self, event: WatchEvent) -> None:
        """Bring the view up to ``event`` (events of one revision may come one by one)."""
        key, put = event.key, event.kind is EventKind.PUT
        if key.startswith(PARTITIONS):
            where = _partition_of(key)
            if put:
                self.partitions[where] = _unpack_state(event.value)
                self.partition_revisions[where] = event.revision
            else:
                self.partitions.pop(where, None)
                self.partition_revisions.pop(where, None)
        elif key.startswith(TOPICS):
            name = key[len(TOPICS) :]
            if put:
                self.topics[name] = _unpack_topic(name, event.value)
            else:
                self.topics.pop(name, None)
        elif key.startswith(BROKERS):
            node = int(key[len(BROKERS) :])
            if put:
                self.brokers[node] = BrokerInfo.decode(event.value)
                self.broker_epochs[node] = event.revision  # registrations are never rewritten
            else:
                self.brokers.pop(node, None)
                self.broker_epochs.pop(node, None)
        elif key == CONTROLLER:
            self.controller = (
                Controller(int(msgpack.unpackb(event.value)), event.revision) if put else None
            )
        self.revision = max(self.revision, event.revision)

    async def follow(self, store: MetadataStore) -> AsyncGenerator[WatchEvent, None]:
        """Apply every change after :attr:`revision`, yielding each once applied.

        Watches the whole root (topics and partitions change in the same
        transactions). Raises CompactedError if the store no longer has the
        changes: the caller loads a new view.
        """
        async with contextlib.aclosing(store.watch("/", self.revision)) as events:
            async for event in events:
                self.apply(event)
                yield event

    def leader_of(self, topic: str, index: int) -> int | None:
        state = self.partitions.get((topic, index))
        return None if state is None or state.leader < 0 else state.leader


def _partition_of(key: str) -> tuple[str, int]:
    topic, _, index = key[len(PARTITIONS) :].rpartition("/")
    return topic, int(index)


async def alter_isr(
    store: MetadataStore,
    topic: str,
    index: int,
    leader: int,
    leader_epoch: int,
    isr: list[int],
    *,
    based_on: int,
) -> tuple[PartitionState, int] | None:
    """A leader changes its partition's ISR: the new state and its revision.

    Not fenced by a controller epoch (the leader is not the controller) but by
    the state itself: it must still be the state of revision ``based_on``, the
    one the leader computed ``isr`` from (Kafka's partition epoch), so that a
    write made meanwhile is never undone: an election, or a damaged or offline
    replica leaving the ISR (which a leader adding it back from an older view
    would make electable again). Returns None then; the leader sees
    the newer state by its watch and decides again.
    """
    found = await read_partition(store, topic, index)
    if found is None:
        return None
    state, revision = found
    if state.leader != leader or state.leader_epoch != leader_epoch or revision != based_on:
        return None
    wanted = state._replace(isr=tuple(r for r in state.replicas if r in set(isr) | {leader}))
    if wanted == state:
        return state, revision
    key = partition_key(topic, index)
    written = await store.commit([Compare(key, revision)], [Put(key, _pack_state(wanted))])
    return None if written is None else (wanted, written)


async def replace_partition_state(
    store: MetadataStore, topic: str, index: int, state: PartitionState, revision: int
) -> int | None:
    """A replica changes its own partition's state (a damaged replica leaving the ISR,
    handing leadership on if it leads): the new revision, None if the state moved.

    Not fenced by a controller epoch, like :func:`alter_isr`: the caller read
    the state at ``revision`` and the write compares it, so a concurrent
    election wins.
    """
    key = partition_key(topic, index)
    return await store.commit([Compare(key, revision)], [Put(key, _pack_state(state))])


def partition_at(key: str) -> tuple[str, int] | None:
    """The (topic, index) whose state lives at ``key``; None for any other key."""
    return _partition_of(key) if key.startswith(PARTITIONS) else None


async def update_topic_configs(
    store: MetadataStore, controller: Controller, name: str, configs: Mapping[str, str]
) -> int:
    """Replace a topic's configs with ``configs`` (validated by the caller); the revision.

    Compare-and-swap on the topic's record, read again if it changed
    meanwhile; raises UnknownTopicOrPartitionError if the topic does not
    exist, NotControllerError if ``controller`` was fenced off.
    """
    revision, failures = await update_topics_configs(store, controller, {name: configs})
    if name in failures:
        raise failures[name]
    return revision


TXN_MAX_TOPICS = 100
"""Topics whose configs one store transaction replaces: etcd refuses a transaction of
more than ``--max-txn-ops`` operations (128 by default); each topic is one compare and
one put, plus the controller's fence. A request naming more topics takes one
transaction per this many (still one write per request for the embedded store's
usual sizes, and never one per topic)."""
TXN_ATTEMPTS = 10
"""Compare-and-swap attempts of one transaction: only the controller writes topic
records, so a second attempt is already rare."""


async def update_topics_configs(
    store: MetadataStore, controller: Controller, configs: Mapping[str, Mapping[str, str]]
) -> tuple[int, dict[str, UnknownTopicOrPartitionError]]:
    """Replace the configs of every topic in ``configs`` (validated by the caller) with
    one transaction per :data:`TXN_MAX_TOPICS` topics; the last revision written (0:
    none), and the topics that do not exist (or kept changing) with their errors.
    NotControllerError if ``controller`` was fenced off."""
    failures: dict[str, UnknownTopicOrPartitionError] = {}
    revision = 0
    names = list(configs)
    for start in range(0, len(names), TXN_MAX_TOPICS):
        chunk = names[start : start + TXN_MAX_TOPICS]
        for _ in range(TXN_ATTEMPTS):
            guards = [fence(controller)]
            ops: list[Operation] = []
            for name in chunk:
                entry = await store.get(topic_key(name))
                if entry is None:
                    failures[name] = UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                    continue
                topic = dataclasses.replace(
                    _unpack_topic(name, entry.value), configs=dict(configs[name])
                )
                guards.append(Compare(entry.key, entry.mod_revision))
                ops.append(Put(entry.key, _pack_topic(topic)))
            if not ops:
                break
            written = await store.commit(guards, ops)
            if written is not None:
                revision = written
                break
            await _refused(store, controller)
            chunk = [name for name in chunk if name not in failures]
        else:
            for name in chunk:
                failures[name] = UnknownTopicOrPartitionError(
                    f"topic {name!r} keeps changing under the controller"
                )
    return revision, failures

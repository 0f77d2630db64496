"""The group coordinator: members, sessions, cooperative assignment, commits.

The rules live in :mod:`mq.groups` (pure); this module feeds them requests and
a clock and turns their answers into responses:

* ``join`` adds a member (a new id for ``member_id=""``), or replaces a static
  member with the same ``group_instance_id`` (the old id is fenced), and
  starts its session;
* ``heartbeat`` renews the session and answers with what the member must own
  and revoke; members still converging are asked to heartbeat sooner;
* a member whose session or revocation deadline passes is expelled, and its
  partitions go to the others; a static member that comes back before its
  session expired takes its partitions back without a rebalance;
* ``commit``/``fetch`` read and write :class:`~mq.broker.offsets.OffsetStore`.

Bounds (``mq.broker.config``): a member subscribes to at most
``group_max_topics_per_member`` topics (INVALID_REQUEST), a group has at most
``group_max_size`` members, the broker at most ``max_groups`` groups with members
and ``max_group_subscriptions`` subscription entries over all of them (one per
member plus one per topic it subscribes to: what the members' memory grows with),
GROUP_MAX_SIZE_REACHED otherwise; all checked before anything is stored. A group whose last
member leaves or expires is freed (its committed offsets stay in the offset store);
a group remembers at most ``group_max_size`` fenced member ids. A join costs the
joining member's topics (the group's topic set is kept as counts): the assignment
is recomputed once per tick (:data:`EXPIRY_TICK_S`) for a group that changed
(``GroupAssignment(deferred=True)``), so N joins in a tick cost one assignor run
over the group, not N; members heartbeat every 100 ms until it is done.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from mq.broker.broker import Broker
from mq.broker.catalog import OFFSETS_TOPIC
from mq.broker.offsets import CommittedOffset, OffsetStore
from mq.errors import (
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    UnknownMemberIdError,
)
from mq.groups.assignors import Subscription, TopicPartition
from mq.groups.rebalance import GroupAssignment, MemberView, Sessions
from mq.wire.limits import MAX_NAME_LEN

log = logging.getLogger(__name__)

MIN_SESSION_TIMEOUT_MS = 1_000
MAX_SESSION_TIMEOUT_MS = 30 * 60_000
HEARTBEAT_MS = 3_000
"""Heartbeat interval of a stable member (capped at a third of its session timeout)."""
CONVERGING_HEARTBEAT_MS = 100
"""Heartbeat interval while a member has partitions to revoke or to receive."""
EXPIRY_TICK_S = 0.1
"""How often expired members are expelled and changed groups get their new target."""


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    topics: tuple[str, ...]
    """Sorted, without duplicates."""
    session_timeout_ms: int
    rebalance_timeout_ms: int

    @property
    def heartbeat_ms(self) -> int:
        return max(CONVERGING_HEARTBEAT_MS, min(HEARTBEAT_MS, self.session_timeout_ms // 3))


@dataclass
class Group:
    group_id: str
    assignment: GroupAssignment
    sessions: Sessions
    revocations: Sessions
    members: dict[str, Member] = field(default_factory=dict)
    fenced: dict[str, None] = field(default_factory=dict)
    """Member ids replaced by a static rejoin, oldest first (an ordered set, bounded by
    the coordinator to ``group_max_size``)."""
    topics: Counter[str] = field(default_factory=Counter)
    """Every topic a member subscribes to, with how many members do: kept with
    ``members`` (by :meth:`add` and :meth:`discard`), read on each heartbeat."""
    entries: int = 0
    """Subscription entries: one per member plus one per topic of each."""

    def add(self, member: Member) -> None:
        """Put ``member`` in ``members`` (replacing one with its id), keeping ``topics``."""
        self.discard(member.member_id)
        self.members[member.member_id] = member
        self.topics.update(member.topics)
        self.entries += 1 + len(member.topics)

    def discard(self, member_id: str) -> None:
        """Remove a member from ``members`` if there, keeping ``topics``: O(its topics)."""
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self.topics.subtract(member.topics)
        self.entries -= 1 + len(member.topics)
        for topic in member.topics:
            if self.topics[topic] <= 0:
                del self.topics[topic]


class GroupCoordinator:
    """Every consumer group whose offsets partition this broker leads."""

    def __init__(
        self, broker: Broker, offsets: OffsetStore, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._broker = broker
        self.offsets = offsets
        self._clock = clock
        self.groups: dict[str, Group] = {}
        self.entries = 0
        """Subscription entries of every group here (:attr:`Group.entries` summed)."""
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.offsets.on_unload = self._unload
        self._task = asyncio.get_running_loop().create_task(self._expire_loop())
        for partition in list(self._broker.partitions.values()):
            if partition.topic == OFFSETS_TOPIC:
                self.offsets.partition_changed(partition)
        if self._broker.config.metadata is None:
            await self.offsets.ensure_topic()  # a single node: at once, as before

    def _unload(self, index: int) -> None:
        """This broker no longer leads offsets partition ``index``: its groups move away."""
        for group_id in [g for g in self.groups if self.offsets.partition_for(g) == index]:
            self.entries -= self.groups.pop(group_id).entries

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # -- membership -----------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        topics: list[str],
        assignor: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
    ) -> tuple[Member, int]:
        """Add or update a member; returns it and the group's generation."""
        if not group_id:
            raise InvalidGroupIdError("a group id must not be empty")
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise InvalidSessionTimeoutError(
                f"session timeout {session_timeout_ms} ms is outside "
                f"[{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}]"
            )
        config = self._broker.config
        subscribed = sorted(set(topics))
        if len(subscribed) > config.group_max_topics_per_member:
            raise InvalidRequestError(
                f"a member may subscribe to at most {config.group_max_topics_per_member} "
                f"topics (group_max_topics_per_member), got {len(subscribed)}"
            )
        group = self._group(group_id, assignor)
        self._expire(group)
        if member_id and member_id not in group.members:
            if member_id in group.fenced:
                raise FencedInstanceIdError(f"member {member_id} was replaced by a newer instance")
            raise UnknownMemberIdError(f"member {member_id} is not in group {group_id}")
        self._admit(group, member_id, instance_id, len(subscribed))
        if not member_id:
            suffix = f"-{uuid.uuid4().hex[:12]}"
            # cut a long client id: the member id must fit a Name (MAX_NAME_LEN)
            member_id = (client_id or "member")[: MAX_NAME_LEN - len(suffix)] + suffix
        member = Member(
            member_id,
            instance_id,
            client_id,
            client_host,
            tuple(subscribed),
            session_timeout_ms,
            rebalance_timeout_ms,
        )
        entries_before = group.entries
        group.assignment.set_partitions(self._partition_counts(group, extra=subscribed))
        replaced = group.assignment.join(
            member_id, Subscription(frozenset(subscribed), instance_id)
        )
        self.groups[group_id] = group
        if replaced is not None:
            group.discard(replaced)
            group.sessions.stop(replaced)
            group.revocations.stop(replaced)
            group.fenced[replaced] = None
            while len(group.fenced) > config.group_max_size:
                del group.fenced[next(iter(group.fenced))]
            log.info("group %s: %s replaces static member %s", group_id, member_id, replaced)
        group.add(member)
        self.entries += group.entries - entries_before
        group.sessions.start(member_id, session_timeout_ms / 1000)
        group.assignment.set_partitions(self._partition_counts(group))
        return member, group.assignment.generation

    def _admit(self, group: Group, member_id: str, instance_id: str | None, topics: int) -> None:
        """Check the bounds before a join stores anything (GROUP_MAX_SIZE_REACHED)."""
        config = self._broker.config
        if group.group_id not in self.groups and len(self.groups) >= config.max_groups:
            raise GroupMaxSizeReachedError(
                f"this broker coordinates {len(self.groups)} groups with members, "
                f"its maximum (max_groups); group {group.group_id} cannot start"
            )
        previous = group.members.get(member_id)
        if previous is None and instance_id is not None:
            static = group.assignment.member_for_instance(instance_id)
            previous = group.members.get(static) if static is not None else None
        if previous is None and len(group.members) >= config.group_max_size:
            raise GroupMaxSizeReachedError(
                f"group {group.group_id} has {len(group.members)} members, its maximum "
                "(group_max_size)"
            )
        added = 1 + topics - (1 + len(previous.topics) if previous is not None else 0)
        if self.entries + added > config.max_group_subscriptions:
            raise GroupMaxSizeReachedError(
                f"the groups here hold {self.entries} subscription entries; "
                f"{added} more would pass max_group_subscriptions"
            )

    def heartbeat(
        self, group_id: str, member_id: str, owned: set[TopicPartition]
    ) -> tuple[MemberView, int, int]:
        """(what to own and revoke, generation, next heartbeat interval in ms)."""
        group, member = self._member(group_id, member_id)
        group.sessions.touch(member_id)
        group.assignment.set_partitions(self._partition_counts(group))  # a no-op if unchanged
        view = group.assignment.heartbeat(member_id, owned)
        if view.revoke:
            if member_id not in group.revocations:
                group.revocations.start(member_id, member.rebalance_timeout_ms / 1000)
        else:
            group.revocations.stop(member_id)
        target = group.assignment.target(member_id)
        converging = view.revoke or view.assignment != target or group.assignment.stale
        interval = CONVERGING_HEARTBEAT_MS if converging else member.heartbeat_ms
        return view, group.assignment.generation, interval

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> None:
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {group_id} has no members")
        if not member_id and instance_id is not None:
            member_id = group.assignment.member_for_instance(instance_id) or ""
        self._member(group_id, member_id)
        self._remove(group, member_id, "left")

    def _member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        group = self.groups.get(group_id)
        if group is not None:
            self._expire(group)
            member = group.members.get(member_id)
            if member is not None:
                return group, member
            if member_id in group.fenced:
                raise FencedInstanceIdError(f"member {member_id} was replaced by a newer instance")
        raise UnknownMemberIdError(f"member {member_id} is not in group {group_id}")

    def _group(self, group_id: str, assignor: str) -> Group:
        group = self.groups.get(group_id)
        if group is not None and group.members and group.assignment.assignor != assignor:
            raise InconsistentGroupProtocolError(
                f"group {group_id} uses the {group.assignment.assignor} assignor, not {assignor}"
            )
        if group is None or not group.members:
            # stored by join once the member is in: a refused join leaves nothing behind
            self.groups.pop(group_id, None)
            group = Group(
                group_id,
                GroupAssignment(assignor, deferred=True),
                Sessions(self._clock),
                Sessions(self._clock),
            )
        return group

    def _partition_counts(self, group: Group, extra: list[str] | None = None) -> dict[str, int]:
        topics = group.topics.keys() | set(extra) if extra else group.topics.keys()
        counts = {}
        for topic in topics:
            info = self._broker.topic(topic)
            if info is not None:
                counts[topic] = info.partitions
        return counts

    def _remove(self, group: Group, member_id: str, why: str) -> None:
        group.assignment.leave(member_id)
        entries_before = group.entries
        group.discard(member_id)
        self.entries += group.entries - entries_before
        group.sessions.stop(member_id)
        group.revocations.stop(member_id)
        log.info("group %s: member %s %s", group.group_id, member_id, why)
        if not group.members and self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]  # freed: its offsets stay in the offset store

    def _expire(self, group: Group) -> None:
        for member_id in {*group.sessions.expired(), *group.revocations.expired()}:
            if member_id in group.members:
                self._remove(group, member_id, "expired")

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_TICK_S)
            for group in list(self.groups.values()):
                self._expire(group)
                group.assignment.flush()  # one assignor run per tick, however many joins

    # -- offsets ------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        offsets: dict[TopicPartition, CommittedOffset],
    ) -> None:
        """Store commits from a member, or from a tool while the group has no members."""
        if not group_id:
            raise InvalidGroupIdError("a group id must not be empty")
        group = self.groups.get(group_id)
        if member_id or generation_id != -1:
            self._member(group_id, member_id)
        elif group is not None and group.members:
            raise UnknownMemberIdError(
                f"group {group_id} has members: only they may commit (stop them to reset offsets)"
            )
        await self.offsets.commit(group_id, offsets)

    def describe_state(self, group_id: str) -> str:
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return "Empty" if self.offsets.committed(group_id) or group else "Dead"
        return group.assignment.state()

    def group_ids(self) -> list[str]:
        live = [g for g, group in self.groups.items() if group.members]
        return sorted(set(live) | set(self.offsets.groups()))

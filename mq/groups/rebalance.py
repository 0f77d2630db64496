"""Cooperative (incremental) rebalancing, static membership and session deadlines.

A consumer group has a *target* assignment, computed by an assignor from the
members' subscriptions and the topics' partition counts, and an *ownership*:
what each member reported owning (consuming) in its last heartbeat, plus what
the coordinator granted it in the answer. A partition never has two owners:
when the target moves it from A to B, A is first told to revoke it, and B only
gets it once A's heartbeat stops reporting it (or A left or was expelled).
Members keep every partition the new target leaves them, without pause, so a
rebalance never stops the whole group.

One partition's life, when the target moves it from A to B::

    owned by A --target moves it to B--> revoking: A commits and stops it
        --A's heartbeat omits it, or A leaves or is expelled--> free
        --B's heartbeat--> owned by B

The group, as :class:`GroupAssignment` sees it, driven by the coordinator::

    join(member, subscription)   a new member, a changed subscription, or a static rejoin
        -> the target is recomputed (the previous target is sticky's hint) and
           ``generation`` goes up if it changed: the group is Reconciling
    heartbeat(member, owned)     every heartbeat interval, from each member
        -> MemberView(assignment, revoke):
           revoke     = owned - target             give these up first
           assignment = target & (owned | free)    free: owned by no other member
           and the member is recorded as owning owned | assignment (of owned, only
           the group's partitions and those it was known to own: a claim of
           anything else cannot grow the state)
    leave(member)                leave_group, session expiry, rebalance timeout
        -> its partitions are free at once; the target is recomputed
    set_partitions(counts)       topics created, deleted or grown
        -> the target is recomputed
    Stable once every member owns exactly its target (``is_stable()``).

The member's side: start consuming ``assignment``; for ``revoke``, commit,
stop, and leave them out of ``owned`` from the next heartbeat on. A member has
at most one heartbeat in flight, and reports what it owns when it sends it; a
lost answer is harmless (the next heartbeat reports less, and the grant is
repeated). A member that reports a partition another member owns (a confused
or fenced client) is told to revoke it.

Static membership: a member that joins with the ``group_instance_id`` of a
member still in the group replaces it (:meth:`GroupAssignment.join` returns
the old member id). The new member id takes over the old one's target as is,
so no other member's assignment changes; the old process is presumed gone, so
its ownership is dropped and the new one is granted the partitions on its
first heartbeat. The coordinator fences the old member id
(``FENCED_INSTANCE_ID``) and moves its session to the new one. "Within the
session timeout" comes from the order of work: before each request the
coordinator expels the members whose session expired (:class:`Sessions`), so a
static member that came back too late finds no one to replace and joins as a
new member, with a rebalance.

Deadlines: the coordinator keeps two :class:`Sessions` on one monotonic
clock: sessions (``start`` on join with the member's session timeout, ``touch``
on each heartbeat) and revocations (``start`` with the rebalance timeout when a
heartbeat answer first carries a non-empty ``revoke``, ``stop`` once it is
empty). A member in either's ``expired()`` is expelled with ``leave``.

Thread safety: none; one coordinator task owns a group's objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Literal, NamedTuple

from mq.errors import InvalidRequestError, UnknownMemberIdError
from mq.groups.assignors import ASSIGNORS, Subscription, TopicPartition

GroupState = Literal["Empty", "Stable", "Reconciling"]
EMPTY: frozenset[TopicPartition] = frozenset()


class MemberView(NamedTuple):
    """The answer to one heartbeat; ``assignment`` and ``revoke`` are disjoint."""

    assignment: frozenset[TopicPartition]
    """Every partition the member owns from now on (keeps or starts consuming)."""
    revoke: frozenset[TopicPartition]
    """Partitions it reported owning and must give up before anyone else gets them."""


class GroupAssignment:
    """One group's members, target assignment and ownership (see the module docstring)."""

    def __init__(self, assignor: str = "sticky", *, deferred: bool = False) -> None:
        if assignor not in ASSIGNORS:
            raise ValueError(f"unknown assignor {assignor!r}; known: {sorted(ASSIGNORS)}")
        self.assignor = assignor
        self.deferred = deferred
        """Whether a change (join, leave, partition counts) only marks the target
        :attr:`stale`, for :meth:`flush` to recompute, instead of recomputing it at once.
        The assignor's run costs O(members + partitions): recomputed per join, N joins
        cost O(N^2); the coordinator flushes once per tick, so a storm of joins costs
        one run per tick. Meanwhile heartbeats answer from the previous target (a new
        member's is empty), which never gives a partition two owners."""
        self._stale = False
        self.generation = 0
        """Goes up each time the target changes; answers carry it, offset commits check it."""
        self._members: dict[str, Subscription] = {}
        self._partitions: dict[str, int] = {}
        self._target: dict[str, frozenset[TopicPartition]] = {}
        self._owned: dict[str, frozenset[TopicPartition]] = {}
        self._owner: dict[TopicPartition, str] = {}
        self._instances: dict[str, str] = {}

    @property
    def members(self) -> Mapping[str, Subscription]:
        return MappingProxyType(self._members)

    @property
    def partitions(self) -> Mapping[str, int]:
        return MappingProxyType(self._partitions)

    def state(self) -> GroupState:
        """What describe_groups shows: Empty, Stable, or Reconciling (a rebalance is under way)."""
        if not self._members:
            return "Empty"
        return "Stable" if self.is_stable() else "Reconciling"

    def join(self, member_id: str, subscription: Subscription) -> str | None:
        """Add a member or change its subscription; return the member id it replaced.

        A new member id whose ``group_instance_id`` belongs to a member of the
        group replaces that member (static rejoin): the target is kept, and
        recomputed only if the subscription changed.
        """
        instance_id = subscription.group_instance_id
        current = self._members.get(member_id)
        if current is not None:
            if current.group_instance_id != instance_id:
                raise InvalidRequestError(
                    f"member {member_id} joined with group instance id "
                    f"{current.group_instance_id!r}, now {instance_id!r}"
                )
            self._members[member_id] = subscription
            if current.topics != subscription.topics:
                self._changed()
            return None
        replaced = None if instance_id is None else self._instances.get(instance_id)
        self._members[member_id] = subscription
        if instance_id is not None:
            self._instances[instance_id] = member_id
        if replaced is None:
            self._target[member_id] = EMPTY
            self._changed()
            return None
        old = self._members.pop(replaced)
        self._target[member_id] = self._target.pop(replaced)
        self._set_owned(replaced, EMPTY)
        if old.topics != subscription.topics:
            self._changed()
        return replaced

    def leave(self, member_id: str) -> None:
        """Remove a member (it left, or was expelled): its partitions are free at once."""
        subscription = self._members.pop(member_id, None)
        if subscription is None:
            raise UnknownMemberIdError(f"member {member_id} is not in the group")
        if subscription.group_instance_id is not None:
            del self._instances[subscription.group_instance_id]
        del self._target[member_id]
        self._set_owned(member_id, EMPTY)
        self._changed()

    def set_partitions(self, partitions: Mapping[str, int]) -> None:
        """Set every topic's partition count (topics absent have none).

        The target is recomputed only if a count changed: every assignor,
        given its own output as ``previous``, returns it unchanged, so a
        recomputation with the same inputs would only cost time.
        """
        if any(count < 0 for count in partitions.values()):
            raise ValueError(f"negative partition count in {dict(partitions)}")
        if partitions != self._partitions:
            self._partitions = dict(partitions)
            self._changed()

    def heartbeat(self, member_id: str, owned: Iterable[TopicPartition]) -> MemberView:
        """Record what the member owns and tell it what to own and what to give up."""
        if member_id not in self._members:
            raise UnknownMemberIdError(f"member {member_id} is not in the group")
        reported = frozenset(owned)
        target = self._target[member_id]
        conflicts = frozenset(tp for tp in reported if self._owner.get(tp, member_id) != member_id)
        assignment = frozenset(tp for tp in target if self._owner.get(tp, member_id) == member_id)
        # Recorded: claims of the group's partitions, and of those the member was known to
        # own (a deleted topic's, until it stops reporting them: the topic may come back).
        # Other claims are in no target, so no one is granted them: they are answered
        # with revoke but not kept, and a member's claims cannot grow the state.
        counts, before = self._partitions, self._owned.get(member_id, EMPTY)
        kept = frozenset(
            tp for tp in reported if tp.partition < counts.get(tp.topic, 0) or tp in before
        )
        self._set_owned(member_id, (kept - conflicts) | assignment)
        return MemberView(assignment, (reported - target) | conflicts)

    def target(self, member_id: str) -> frozenset[TopicPartition]:
        """What the member will own once the group is stable."""
        return self._target[member_id]

    def owned(self, member_id: str) -> frozenset[TopicPartition]:
        """What the member owns as far as the coordinator knows (empty before its heartbeat)."""
        return self._owned.get(member_id, EMPTY)

    def member_for_instance(self, group_instance_id: str) -> str | None:
        """The member id that currently holds a static instance id."""
        return self._instances.get(group_instance_id)

    def revoking(self) -> list[str]:
        """Members that still own partitions outside their target, sorted."""
        return sorted(m for m, owned in self._owned.items() if owned - self._target[m])

    def is_stable(self) -> bool:
        """Every member owns exactly its target (and the target is not stale)."""
        if self._stale:
            return False
        return all(self.owned(m) == target for m, target in self._target.items())

    @property
    def stale(self) -> bool:
        """Whether a change waits for :meth:`flush` (only when :attr:`deferred`)."""
        return self._stale

    def flush(self) -> bool:
        """Recompute a stale target; whether it was stale."""
        if not self._stale:
            return False
        self._retarget()
        return True

    def _changed(self) -> None:
        if self.deferred:
            self._stale = True
        else:
            self._retarget()

    def _retarget(self) -> None:
        self._stale = False
        assigned = ASSIGNORS[self.assignor](self._members, self._partitions, self._target)
        target = {member_id: frozenset(assigned[member_id]) for member_id in self._members}
        if target != self._target:
            self.generation += 1
        self._target = target

    def _set_owned(self, member_id: str, owned: frozenset[TopicPartition]) -> None:
        before = self._owned.pop(member_id, EMPTY)
        for tp in before - owned:
            del self._owner[tp]
        for tp in owned - before:
            self._owner[tp] = member_id
        if owned:
            self._owned[member_id] = owned


class Sessions:
    """Deadlines per member on an injected clock (e.g. ``time.monotonic``).

    ``start`` sets a member's timeout and deadline, ``touch`` pushes the
    deadline to now + timeout, ``expired`` lists the members whose deadline has
    come. Timeouts are in the clock's unit. Nothing is removed implicitly: the
    coordinator ``stop``s a member when it expels it or the member leaves.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._timeout: dict[str, float] = {}
        self._deadline: dict[str, float] = {}

    def __contains__(self, member_id: object) -> bool:
        return member_id in self._deadline

    def __len__(self) -> int:
        return len(self._deadline)

    def start(self, member_id: str, timeout: float) -> None:
        """Track a member (again), with this timeout from now."""
        if timeout < 0:
            raise ValueError(f"negative timeout {timeout}")
        self._timeout[member_id] = timeout
        self._deadline[member_id] = self._clock() + timeout

    def touch(self, member_id: str) -> None:
        """The member showed signs of life: its deadline is now + its timeout."""
        self._deadline[member_id] = self._clock() + self._timeout[member_id]

    def stop(self, member_id: str) -> None:
        """Forget a member (no error if it is not tracked)."""
        self._timeout.pop(member_id, None)
        self._deadline.pop(member_id, None)

    def expired(self) -> list[str]:
        """Members whose deadline is now or past, earliest deadline first."""
        now = self._clock()
        due = [(deadline, m) for m, deadline in self._deadline.items() if deadline <= now]
        return [m for _, m in sorted(due)]

    def next_deadline(self) -> float | None:
        """The earliest deadline, for the coordinator's timer (None: nothing tracked)."""
        return min(self._deadline.values(), default=None)

"""Partition reassignment and preferred leader election, as the controller runs them.

Kafka's KIP-455, over the pure steps of :mod:`mq.replication.placement`:

1. :func:`reassign` starts a move: the partition's replicas become the target
   plus the replicas it is leaving (``adding`` / ``removing`` say which), the
   leader stays. Its followers, new ones included, fetch from the leader.
2. The leader adds each new replica to the ISR once it has caught up (a
   compare-and-swap of the partition's state of its own).
3. The controller sees that write through its watch and calls :func:`finish`:
   once every new replica is in sync, the replicas shrink to the target, the
   ISR loses the removed ones and leadership moves to the target's preferred
   leader (or off a removed leader), with a new leader epoch.

A reassignment is cancelled by asking for None instead of a target: the
partition goes back to its original replicas (the replicas less those being
added). :func:`elect_preferred` moves leadership back to preferred leaders.

The functions here hold the rules; they read the controller's
:class:`~mq.replication.cluster_state.ClusterView` and write through the
controller's fenced compare-and-swap loop (``write``), so a controller that
lost its seat changes nothing. Per-partition failures come back as results;
:class:`~mq.errors.NotControllerError` fails the whole request.

Thread safety: one event loop (the controller's).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence, Set
from functools import partial

from mq.errors import (
    ElectionNotNeededError,
    InvalidReplicaAssignmentError,
    MQError,
    NoReassignmentInProgressError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from mq.replication.cluster_state import ClusterView
from mq.replication.placement import (
    PartitionState,
    TopicPartitionKey,
    cancel_reassignment,
    finish_reassignment,
    preferred_leader_election,
    start_reassignment,
)

log = logging.getLogger(__name__)

Change = Callable[[PartitionState], PartitionState]
Write = Callable[[str, int, Change], Awaitable[PartitionState | None]]
"""The controller's fenced compare-and-swap of one partition: applies the change to
the state it reads (again if the state changed meanwhile) and returns the state
stored afterwards, or None if the partition no longer exists."""
Results = dict[TopicPartitionKey, MQError | None]
"""Per partition: None if it went through, else why not."""


async def reassign(
    live: Set[int],
    moves: Mapping[TopicPartitionKey, Sequence[int] | None],
    write: Write,
) -> Results:
    """Start a reassignment to each target (None: cancel the one in progress).

    Refused per partition: an unknown partition (UNKNOWN_TOPIC_OR_PARTITION),
    a target that is empty, names a broker twice or a broker that is not
    ``live`` (INVALID_REPLICA_ASSIGNMENT), a cancel with nothing in progress
    (NO_REASSIGNMENT_IN_PROGRESS). A target replacing one in progress starts
    from the original replicas. The checks are made on the state as stored
    (the controller's view may not show a topic created a moment ago).
    """
    results: Results = {}
    for key in sorted(moves):
        target = moves[key]
        try:
            if target is None:
                change: Change = _cancel
            else:
                dead = sorted(set(target) - live)
                if dead:
                    raise InvalidReplicaAssignmentError(
                        f"{_name(key)}: brokers {dead} are not alive"
                    )
                change = partial(start_reassignment, target=tuple(target))
            await _write(write, key, change)
            log.info("controller: %s goes to %s", _name(key), target or "its original replicas")
            results[key] = None
        except NotControllerError:
            raise
        except MQError as exc:
            results[key] = exc
    return results


async def finish(view: ClusterView, key: TopicPartitionKey, write: Write) -> None:
    """End the partition's reassignment if it can end now (else do nothing)."""
    state = view.partitions.get(key)
    if state is not None and finish_reassignment(state) is not None:
        await write(key[0], key[1], _finished)


async def finish_all(view: ClusterView, write: Write) -> None:
    """End every reassignment that can end (a new controller takes over the pending ones)."""
    for key in sorted(in_progress(view)):
        await finish(view, key, write)


def in_progress(view: ClusterView) -> dict[TopicPartitionKey, PartitionState]:
    """The partitions with a reassignment in progress, and their states."""
    return {key: s for key, s in sorted(view.partitions.items()) if s.reassigning}


async def elect_preferred(
    states: Mapping[TopicPartitionKey, PartitionState],
    live: Set[int],
    partitions: Iterable[TopicPartitionKey] | None,
    write: Write,
) -> Results:
    """Move leadership to each partition's preferred leader (its first replica).

    ``partitions`` None: every partition of ``states`` not led by its
    preferred leader (those that are are left out of the results).
    Refused per partition: unknown (UNKNOWN_TOPIC_OR_PARTITION), already led
    by its preferred leader (ELECTION_NOT_NEEDED), preferred leader not live
    or not in sync (PREFERRED_LEADER_NOT_AVAILABLE).
    """
    if partitions is None:
        keys = [k for k, s in sorted(states.items()) if s.leader != s.replicas[0]]
    else:
        keys = list(dict.fromkeys(partitions))
    change = partial(_elect_preferred, live=frozenset(live))
    results: Results = {}
    for key in keys:
        try:
            written = await _write(write, key, change)
            preferred = written.replicas[0]
            if written.leader != preferred:
                raise PreferredLeaderNotAvailableError(
                    f"preferred leader {preferred} of {_name(key)} is "
                    f"{'not in sync' if preferred in live else 'not alive'}"
                )
            results[key] = None
        except NotControllerError:
            raise
        except ElectionNotNeededError as exc:
            if partitions is not None:
                results[key] = exc
        except MQError as exc:
            results[key] = exc
    return results


async def _write(write: Write, key: TopicPartitionKey, change: Change) -> PartitionState:
    written = await write(key[0], key[1], change)
    if written is None:
        raise UnknownTopicOrPartitionError(f"{_name(key)} does not exist")
    return written


def _elect_preferred(state: PartitionState, live: Set[int]) -> PartitionState:
    if state.leader == state.replicas[0]:
        raise ElectionNotNeededError(f"the preferred leader {state.leader} leads already")
    return preferred_leader_election(state, live)


def _cancel(state: PartitionState) -> PartitionState:
    if not state.reassigning:
        raise NoReassignmentInProgressError(f"replicas {list(state.replicas)} are not moving")
    return cancel_reassignment(state)


def _finished(state: PartitionState) -> PartitionState:
    return finish_reassignment(state) or state


def _name(key: TopicPartitionKey) -> str:
    return f"{key[0]}-{key[1]}"

"""Handlers of the controller's APIs: elect_leaders and partition reassignments.

They run on the controller, through this broker's
:class:`~mq.replication.controller.ControllerSeat` (``broker.seat``); on any
other broker they fail as a whole with NOT_CONTROLLER (the server forwards
these requests to the controller). Per-partition failures are answered per
partition.
"""

from __future__ import annotations

from mq.broker.broker import Broker
from mq.broker.context import RequestContext
from mq.errors import NotControllerError
from mq.replication.controller import ControllerSeat
from mq.replication.reassignment import Results
from mq.wire.apis_cluster import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    OngoingReassignment,
    PartitionResult,
    TopicPartitionResults,
)


async def elect_leaders(
    broker: Broker, ctx: RequestContext, body: ElectLeadersRequest
) -> ElectLeadersResponse:
    """Preferred leader election of the named partitions (None: of every one not so led)."""
    seat = _seat(broker)
    named = body["topics"]
    wanted = None if named is None else [(t["name"], p) for t in named for p in t["partitions"]]
    return {"topics": _by_topic(await seat.elect_preferred_leaders(wanted))}


async def alter_partition_reassignments(
    broker: Broker, ctx: RequestContext, body: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    """Start (or, with replicas None, cancel) reassignments; answered once they are written."""
    seat = _seat(broker)
    moves = {
        (t["name"], p["partition"]): p["replicas"] for t in body["topics"] for p in t["partitions"]
    }
    return {"topics": _by_topic(await seat.reassign_partitions(moves))}


async def list_partition_reassignments(
    broker: Broker, ctx: RequestContext, body: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    """The reassignments in progress (of the named partitions; None: of all)."""
    ongoing = _seat(broker).list_reassignments()
    named = body["topics"]
    if named is not None:
        wanted = {(t["name"], p) for t in named for p in t["partitions"]}
        ongoing = {key: state for key, state in ongoing.items() if key in wanted}
    topics: dict[str, list[OngoingReassignment]] = {}
    for (name, index), state in sorted(ongoing.items()):
        topics.setdefault(name, []).append(
            {
                "partition": index,
                "replicas": list(state.replicas),
                "adding": list(state.adding),
                "removing": list(state.removing),
            }
        )
    return {"topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


def _seat(broker: Broker) -> ControllerSeat:
    seat = broker.seat
    if seat is None or seat.controller is None:
        raise NotControllerError(f"broker {broker.config.node_id} is not the controller")
    return seat


def _by_topic(results: Results) -> list[TopicPartitionResults]:
    topics: dict[str, list[PartitionResult]] = {}
    for (name, index), error in sorted(results.items(), key=lambda item: item[0]):
        topics.setdefault(name, []).append(
            {
                "partition": index,
                "error": 0 if error is None else error.code,
                "message": None if error is None else error.message,
            }
        )
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]

"""Cluster APIs the controller answers: preferred leader election and partition reassignment.

Kafka's keys and KIP-455's shape: alter_partition_reassignments starts (or,
with ``replicas`` None, cancels) moves of partitions to new replica lists and
answers at once; a move completes in the background once the new replicas
are in sync; list_partition_reassignments shows the moves in progress.
Per-partition results carry an ``error`` code (0 = none) and a ``message``;
a failure of the whole request (NOT_CONTROLLER) is the envelope's error code.
"""

from __future__ import annotations

from typing import Annotated, TypedDict

from mq.wire import limits
from mq.wire.apis_core import NodeIds
from mq.wire.registry import define_api
from mq.wire.schema import (
    Default,
    ErrorCode,
    ErrorMessage,
    Len,
    NonNegI32,
    PartitionId,
    TopicName,
)

Partitions = Annotated[list[PartitionId], Len(0, limits.MAX_PARTITIONS)]


class TopicPartitions(TypedDict):
    name: TopicName
    partitions: Partitions


class PartitionResult(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage


class TopicPartitionResults(TypedDict):
    name: TopicName
    partitions: Annotated[list[PartitionResult], Len(0, limits.MAX_PARTITIONS)]


# -- elect_leaders (43): move leadership back to preferred leaders ----------------------------


class ElectLeadersRequest(TypedDict):
    topics: Annotated[list[TopicPartitions] | None, Len(0, limits.MAX_TOPICS), Default(None)]
    """None: every partition not led by its preferred leader."""
    timeout_ms: Annotated[NonNegI32, Default(30_000)]


class ElectLeadersResponse(TypedDict):
    topics: Annotated[list[TopicPartitionResults], Len(0, limits.MAX_TOPICS)]
    """Per partition: ELECTION_NOT_NEEDED if already led by its preferred leader,
    PREFERRED_LEADER_NOT_AVAILABLE if that one is not alive or not in sync."""


ELECT_LEADERS = define_api(43, "elect_leaders", ElectLeadersRequest, ElectLeadersResponse)

# -- alter_partition_reassignments (45): start or cancel moves of replicas --------------------


class ReassignablePartition(TypedDict):
    partition: PartitionId
    replicas: Annotated[NodeIds | None, Len(0, limits.MAX_BROKERS)]
    """The target replica list, preferred leader first; None cancels the move in progress."""


class ReassignableTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[ReassignablePartition], Len(0, limits.MAX_PARTITIONS)]


class AlterPartitionReassignmentsRequest(TypedDict):
    topics: Annotated[list[ReassignableTopic], Len(0, limits.MAX_TOPICS)]
    timeout_ms: Annotated[NonNegI32, Default(30_000)]


class AlterPartitionReassignmentsResponse(TypedDict):
    topics: Annotated[list[TopicPartitionResults], Len(0, limits.MAX_TOPICS)]
    """Per partition: INVALID_REPLICA_ASSIGNMENT for an empty target, one naming a
    broker twice or a broker that is not alive; NO_REASSIGNMENT_IN_PROGRESS for a
    cancel with nothing to cancel; UNKNOWN_TOPIC_OR_PARTITION."""


ALTER_PARTITION_REASSIGNMENTS = define_api(
    45,
    "alter_partition_reassignments",
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)

# -- list_partition_reassignments (46): the moves in progress ---------------------------------


class ListPartitionReassignmentsRequest(TypedDict):
    topics: Annotated[list[TopicPartitions] | None, Len(0, limits.MAX_TOPICS), Default(None)]
    """None: every partition; partitions without a move in progress are left out."""
    timeout_ms: Annotated[NonNegI32, Default(30_000)]


class OngoingReassignment(TypedDict):
    partition: PartitionId
    replicas: NodeIds
    """The target's replicas first, then those being removed."""
    adding: NodeIds
    removing: NodeIds


class OngoingTopicReassignments(TypedDict):
    name: TopicName
    partitions: Annotated[list[OngoingReassignment], Len(0, limits.MAX_PARTITIONS)]


class ListPartitionReassignmentsResponse(TypedDict):
    topics: Annotated[list[OngoingTopicReassignments], Len(0, limits.MAX_TOPICS)]


LIST_PARTITION_REASSIGNMENTS = define_api(
    46,
    "list_partition_reassignments",
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

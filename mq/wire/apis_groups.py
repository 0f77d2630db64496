"""Consumer-group APIs: coordinator lookup, membership, offsets, listing.

mq's group protocol has no sync step: the coordinator computes the assignment
itself (range, round-robin or sticky) and hands it out in heartbeat
responses, like Kafka's KIP-848 protocol. Rebalancing is incremental
(cooperative): a heartbeat response says which partitions the member owns now
(``assignment``) and which of the ones it reported owning it must give up
(``revoke``); a partition moves to its new owner only after the old owner
stops reporting it, so members that keep their partitions never stop
consuming. Static members (``group_instance_id``) that come back within the
session timeout get their partitions back without a rebalance.

Typical life of a member::

    join_group(member_id="")        -> member_id, generation, heartbeat_interval_ms
    heartbeat(owned={})             -> assignment {"t": [0, 1]}, revoke {}
    ... every heartbeat_interval_ms, reporting what it owns ...
    heartbeat(owned={"t": [0, 1]})  -> assignment {"t": [0]}, revoke {"t": [1]}
    offset_commit(...); leave_group(...)
"""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from mq.wire import limits
from mq.wire.registry import define_api
from mq.wire.schema import (
    I32,
    I64,
    Default,
    ErrorCode,
    ErrorMessage,
    Len,
    Name,
    NonNegI32,
    NonNegI64,
    PartitionId,
    Range,
    Text,
    TopicName,
)

Partitions = Annotated[list[PartitionId], Len(0, limits.MAX_PARTITIONS)]
Assignment = Annotated[dict[TopicName, Partitions], Len(0, limits.MAX_TOPICS)]
"""topic -> partition ids."""
InstanceId = Annotated[Name | None, Default(None)]
"""Static membership: a stable id per consumer process (e.g. its host name)."""
Assignor = Literal["range", "roundrobin", "sticky"]

# -- find_coordinator (10) ---------------------------------------------------------------------


class FindCoordinatorRequest(TypedDict):
    key: Name
    """The group id."""
    key_type: Annotated[Literal[0, 1], Default(0)]
    """0: consumer group; 1: transactional id (reserved)."""


class FindCoordinatorResponse(TypedDict):
    node_id: I32
    host: Name
    port: Annotated[int, Range(0, 65_535)]


FIND_COORDINATOR = define_api(
    10, "find_coordinator", FindCoordinatorRequest, FindCoordinatorResponse
)

# -- join_group (11) / heartbeat (12) / leave_group (13) ---------------------------------------


class JoinGroupRequest(TypedDict):
    group_id: Name
    member_id: Name
    """"" for a new member; the coordinator's id for a member rejoining."""
    group_instance_id: InstanceId
    session_timeout_ms: NonNegI32
    rebalance_timeout_ms: NonNegI32
    """How long the coordinator waits for this member to revoke partitions."""
    topics: Annotated[list[TopicName], Len(0, limits.MAX_TOPICS)]
    """The subscription."""
    assignor: Assignor


class JoinGroupResponse(TypedDict):
    member_id: Name
    generation_id: I32
    heartbeat_interval_ms: NonNegI32


JOIN_GROUP = define_api(11, "join_group", JoinGroupRequest, JoinGroupResponse)


class HeartbeatRequest(TypedDict):
    group_id: Name
    member_id: Name
    generation_id: I32
    owned: Assignment
    """The partitions the member owns (consumes) right now."""


class HeartbeatResponse(TypedDict):
    generation_id: I32
    assignment: Assignment
    """Every partition the member should own now (it starts consuming the new ones)."""
    revoke: Assignment
    """Owned partitions to give up: commit, stop, and leave them out of ``owned``."""
    heartbeat_interval_ms: NonNegI32


HEARTBEAT = define_api(12, "heartbeat", HeartbeatRequest, HeartbeatResponse)


class LeaveGroupRequest(TypedDict):
    group_id: Name
    member_id: Name
    group_instance_id: InstanceId
    reason: Annotated[Text | None, Default(None)]


class LeaveGroupResponse(TypedDict):
    pass


LEAVE_GROUP = define_api(13, "leave_group", LeaveGroupRequest, LeaveGroupResponse)

# -- offset_commit (8) / offset_fetch (9) ------------------------------------------------------


class OffsetCommitPartition(TypedDict):
    partition: PartitionId
    offset: NonNegI64
    """The next offset to consume."""
    leader_epoch: Annotated[I32, Default(-1)]
    metadata: Annotated[Text | None, Default(None)]
    """Free-form; the coordinator refuses more than its offset.metadata.max.bytes
    with OFFSET_METADATA_TOO_LARGE for that partition."""


class OffsetCommitTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[OffsetCommitPartition], Len(0, limits.MAX_PARTITIONS)]


class OffsetCommitRequest(TypedDict):
    group_id: Name
    generation_id: I32
    """-1 with member_id "": a commit from outside the group (tools), only
    accepted while the group has no members."""
    member_id: Name
    group_instance_id: InstanceId
    topics: Annotated[list[OffsetCommitTopic], Len(0, limits.MAX_TOPICS)]


class PartitionResult(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage


class OffsetCommitResultTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[PartitionResult], Len(0, limits.MAX_PARTITIONS)]


class OffsetCommitResponse(TypedDict):
    topics: Annotated[list[OffsetCommitResultTopic], Len(0, limits.MAX_TOPICS)]


OFFSET_COMMIT = define_api(8, "offset_commit", OffsetCommitRequest, OffsetCommitResponse)


class OffsetFetchTopic(TypedDict):
    name: TopicName
    partitions: Partitions


class OffsetFetchRequest(TypedDict):
    group_id: Name
    topics: Annotated[list[OffsetFetchTopic] | None, Len(0, limits.MAX_TOPICS), Default(None)]
    """None: every partition the group has committed."""


class FetchedOffset(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    offset: I64
    """-1: nothing committed."""
    leader_epoch: Annotated[I32, Default(-1)]
    metadata: Annotated[Text | None, Default(None)]


class FetchedOffsetsTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[FetchedOffset], Len(0, limits.MAX_PARTITIONS)]


class OffsetFetchResponse(TypedDict):
    topics: Annotated[list[FetchedOffsetsTopic], Len(0, limits.MAX_TOPICS)]


OFFSET_FETCH = define_api(9, "offset_fetch", OffsetFetchRequest, OffsetFetchResponse)

# -- describe_groups (15) / list_groups (16) ---------------------------------------------------


class DescribeGroupsRequest(TypedDict):
    groups: Annotated[list[Name], Len(0, limits.MAX_GROUPS)]


class GroupMember(TypedDict):
    member_id: Name
    group_instance_id: InstanceId
    client_id: Name
    client_host: Name
    topics: Annotated[list[TopicName], Len(0, limits.MAX_TOPICS)]
    assignment: Assignment


class GroupOffset(TypedDict):
    """Where the group is in one partition; lag = high_watermark - committed_offset."""

    topic: TopicName
    partition: PartitionId
    committed_offset: I64
    """-1: nothing committed."""
    high_watermark: I64
    """-1: unknown (the partition is offline or not on this broker)."""


class DescribedGroup(TypedDict):
    group_id: Name
    error: ErrorCode
    message: ErrorMessage
    state: Annotated[Name, Default("")]
    """"Empty", "Stable", "Reconciling" (a cooperative rebalance is under way) or "Dead"."""
    assignor: Annotated[Name, Default("")]
    generation_id: Annotated[I32, Default(-1)]
    members: Annotated[list[GroupMember], Len(0, limits.MAX_GROUP_MEMBERS), Default([])]
    offsets: Annotated[list[GroupOffset], Len(0, limits.MAX_PARTITIONS), Default([])]


class DescribeGroupsResponse(TypedDict):
    groups: Annotated[list[DescribedGroup], Len(0, limits.MAX_GROUPS)]


DESCRIBE_GROUPS = define_api(15, "describe_groups", DescribeGroupsRequest, DescribeGroupsResponse)


class ListGroupsRequest(TypedDict):
    states: Annotated[list[Name], Len(0, 16), Default([])]  # a group has 4 states; 16 is ample
    """Only groups in these states; empty: every group."""


class ListedGroup(TypedDict):
    group_id: Name
    state: Name


class ListGroupsResponse(TypedDict):
    groups: Annotated[list[ListedGroup], Len(0, limits.MAX_GROUPS)]


LIST_GROUPS = define_api(16, "list_groups", ListGroupsRequest, ListGroupsResponse)

"""Handlers of the consumer-group APIs: wire shapes in and out of the coordinator."""

from __future__ import annotations

import asyncio
from typing import Any

from mq.broker.broker import Broker
from mq.broker.catalog import OFFSETS_TOPIC
from mq.broker.context import RequestContext, set_error
from mq.broker.coordinator import GroupCoordinator
from mq.broker.offsets import MAX_METADATA_BYTES, CommittedOffset
from mq.broker.pacing import Pacer, queued
from mq.errors import (
    CoordinatorNotAvailableError,
    MQError,
    OffsetMetadataTooLargeError,
    UnknownTopicOrPartitionError,
)
from mq.groups.assignors import TopicPartition, from_wire, to_wire
from mq.wire.apis_groups import (
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GroupOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
)


def _coordinator(broker: Broker, group_id: str | None = None) -> GroupCoordinator:
    """The coordinator, checked to coordinate ``group_id`` here (NOT_COORDINATOR otherwise)."""
    coordinator = broker.coordinator
    if coordinator is None:
        raise CoordinatorNotAvailableError("the group coordinator is starting")
    if group_id:
        coordinator.offsets.require(group_id)
    return coordinator


async def find_coordinator(
    broker: Broker, ctx: RequestContext, body: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    """The leader of the offsets partition the group hashes to (creating the topic first)."""
    offsets = _coordinator(broker).offsets
    await offsets.ensure_topic()
    index = offsets.partition_for(body["key"])
    leader = broker.view.leader_of(OFFSETS_TOPIC, index)
    info = broker.view.brokers.get(leader) if leader is not None else None
    if info is None:
        raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC}-{index} has no live leader")
    return {"node_id": info.node_id, "host": info.host, "port": info.port}


async def join_group(
    broker: Broker, ctx: RequestContext, body: JoinGroupRequest
) -> JoinGroupResponse:
    member, generation = _coordinator(broker, body["group_id"]).join(
        body["group_id"],
        body["member_id"],
        body["group_instance_id"],
        body["topics"],
        body["assignor"],
        body["session_timeout_ms"],
        body["rebalance_timeout_ms"],
        ctx.client_id or "",
        ctx.peer,
    )
    return {
        "member_id": member.member_id,
        "generation_id": generation,
        "heartbeat_interval_ms": member.heartbeat_ms,
    }


async def heartbeat(
    broker: Broker, ctx: RequestContext, body: HeartbeatRequest
) -> HeartbeatResponse:
    view, generation, interval = _coordinator(broker, body["group_id"]).heartbeat(
        body["group_id"], body["member_id"], from_wire(body["owned"])
    )
    return {
        "generation_id": generation,
        "assignment": to_wire(view.assignment),
        "revoke": to_wire(view.revoke),
        "heartbeat_interval_ms": interval,
    }


async def leave_group(
    broker: Broker, ctx: RequestContext, body: LeaveGroupRequest
) -> LeaveGroupResponse:
    _coordinator(broker, body["group_id"]).leave(
        body["group_id"], body["member_id"], body["group_instance_id"]
    )
    return {}


async def offset_commit(
    broker: Broker, ctx: RequestContext, body: OffsetCommitRequest
) -> OffsetCommitResponse:
    """Commit every valid partition at once; per-partition errors for the others."""
    response: OffsetCommitResponse = {"topics": []}
    offsets: dict[TopicPartition, CommittedOffset] = {}
    results: list[PartitionResult] = []
    known: dict[str, int] = {}  # topic → partitions (0: no such topic), one look-up each
    pacer = Pacer()  # (many entries: nothing else of this connection starts until queued())
    for topic in body["topics"]:
        topic_results: list[PartitionResult] = []
        response["topics"].append({"name": topic["name"], "partitions": topic_results})
        if topic["name"] not in known:
            info = await broker.topics.catch_up_on(topic["name"])
            known[topic["name"]] = 0 if info is None else info.partitions
        for part in topic["partitions"]:
            if pacer.due():
                await asyncio.sleep(0)
            result: PartitionResult = {"partition": part["partition"], "error": 0, "message": None}
            topic_results.append(result)
            if not 0 <= part["partition"] < known[topic["name"]]:  # as Kafka: no offsets
                set_error(  # for what does not exist
                    result,
                    UnknownTopicOrPartitionError(
                        f"{topic['name']}-{part['partition']} does not exist"
                    ),
                )
                continue
            metadata = part["metadata"]
            if metadata is not None and len(metadata.encode()) > MAX_METADATA_BYTES:
                error = OffsetMetadataTooLargeError(f"metadata over {MAX_METADATA_BYTES} bytes")
                set_error(result, error)
                continue
            offsets[TopicPartition(topic["name"], part["partition"])] = CommittedOffset(
                part["offset"], part["leader_epoch"], metadata, 0
            )
            results.append(result)
    try:
        await _coordinator(broker, body["group_id"]).commit(
            body["group_id"], body["member_id"], body["generation_id"], offsets
        )
    except MQError as exc:
        for result in results:
            set_error(result, exc)
    finally:
        queued()  # committed (or failed): its connection's next request may start
    return response


async def offset_fetch(
    broker: Broker, ctx: RequestContext, body: OffsetFetchRequest
) -> OffsetFetchResponse:
    committed = _coordinator(broker, body["group_id"]).offsets.committed(body["group_id"])
    wanted: dict[str, list[int]] = {}
    if body["topics"] is None:
        for tp in sorted(committed):
            wanted.setdefault(tp.topic, []).append(tp.partition)
    else:
        wanted = {t["name"]: list(t["partitions"]) for t in body["topics"]}
    response: OffsetFetchResponse = {"topics": []}
    pacer = Pacer()
    for name, partitions in wanted.items():
        entries: list[Any] = []
        for index in partitions:
            if pacer.due():  # reads only: other clients may act in between
                await asyncio.sleep(0)
            found = committed.get(TopicPartition(name, index))
            entries.append(
                {
                    "partition": index,
                    "error": 0,
                    "message": None,
                    "offset": found.offset if found else -1,
                    "leader_epoch": found.leader_epoch if found else -1,
                    "metadata": found.metadata if found else None,
                }
            )
        response["topics"].append({"name": name, "partitions": entries})
    return response


async def describe_groups(
    broker: Broker, ctx: RequestContext, body: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    """Members with what they own, and per partition the committed offset and high watermark."""
    coordinator = _coordinator(broker)
    response: DescribeGroupsResponse = {"groups": []}
    for group_id in dict.fromkeys(body["groups"]):  # a group asked twice is described once
        try:
            coordinator.offsets.require(group_id)
        except MQError as exc:
            failed: DescribedGroup = {
                "group_id": group_id,
                "error": exc.code,
                "message": exc.message,
                "state": "Dead",
                "assignor": "",
                "generation_id": -1,
                "members": [],
                "offsets": [],
            }
            response["groups"].append(failed)
            continue
        group = coordinator.groups.get(group_id)
        members: list[Any] = []
        assignor, generation = "", -1
        if group is not None:
            assignor, generation = group.assignment.assignor, group.assignment.generation
            for member in group.members.values():
                members.append(
                    {
                        "member_id": member.member_id,
                        "group_instance_id": member.instance_id,
                        "client_id": member.client_id,
                        "client_host": member.client_host,
                        "topics": list(member.topics),
                        "assignment": to_wire(group.assignment.owned(member.member_id)),
                    }
                )
        committed = coordinator.offsets.committed(group_id)
        owned = {tp for m in members for tp in from_wire(m["assignment"])}
        offsets: list[GroupOffset] = []
        for tp in sorted(set(committed) | owned):
            hosted = broker.partitions.get((tp.topic, tp.partition))
            found = committed.get(tp)
            offsets.append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "committed_offset": found.offset if found else -1,
                    "high_watermark": hosted.high_watermark if hosted else -1,
                }
            )
        described: DescribedGroup = {
            "group_id": group_id,
            "error": 0,
            "message": None,
            "state": coordinator.describe_state(group_id),
            "assignor": assignor,
            "generation_id": generation,
            "members": members,
            "offsets": offsets,
        }
        response["groups"].append(described)
    return response


async def list_groups(
    broker: Broker, ctx: RequestContext, body: ListGroupsRequest
) -> ListGroupsResponse:
    coordinator = _coordinator(broker)
    states = set(body["states"])
    groups: list[Any] = []
    for group_id in coordinator.group_ids():
        state = coordinator.describe_state(group_id)
        if not states or state in states:
            groups.append({"group_id": group_id, "state": state})
    return {"groups": groups}

"""What the HTTP admin API answers: the cluster, topics and groups as JSON-ready dicts.

Where the data comes from (every broker answers for the whole cluster):

* **the broker's view** (:class:`~mq.replication.cluster_state.ClusterView`, which
  every broker keeps current by a watch): brokers, controller, topics, each
  partition's replicas, leader, leader epoch and ISR, hence the partitions that
  are under-replicated (ISR smaller than the replicas) or offline (no live leader);
* **this broker's own replicas**: the size of a partition's log on disk, for the
  partitions with a replica here (``null`` for the others: no API asks another
  broker for its log sizes yet);
* **peer calls** (:meth:`~mq.broker.peers.Peers.call_node`, a connection that
  identified itself as this cluster's broker) for what other brokers hold, and
  for what this one holds in the same way: start and end offsets from each
  partition's leader (``list_offsets``), groups from every broker
  (``list_groups``) and each group's coordinator (``describe_groups``); queue
  depths from each partition's leader (``describe_queue``, in
  :mod:`mq.http.admin_queues`), records from a partition's leader (``fetch``, in
  :mod:`mq.http.browse`).

Every answer is bounded: at most :data:`MAX_TOPICS` topics, :data:`MAX_PARTITIONS`
partitions per topic, :data:`MAX_GROUPS` groups (:data:`MAX_DESCRIBED_GROUPS` of
them described), each call :data:`CALL_TIMEOUT_S`; what is left out is counted (``"truncated"``).

Thread safety: one event loop (the broker's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from mq.errors import GroupIdNotFoundError, MQError, UnknownTopicOrPartitionError, error_for_code
from mq.queues import config as qc
from mq.replication.placement import PartitionState
from mq.wire.apis_data import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, LIST_OFFSETS
from mq.wire.apis_groups import DESCRIBE_GROUPS, FIND_COORDINATOR, LIST_GROUPS
from mq.wire.registry import Api

if TYPE_CHECKING:
    from mq.broker.broker import Broker

T = TypeVar("T")

MAX_TOPICS: Final = 1_000
"""Topics listed by /api/topics (sorted by name): a page of a browser, not a dump."""
MAX_PARTITIONS: Final = 1_000
"""Partitions described for one topic; the wire's MAX_PARTITIONS per request is larger."""
MAX_GROUPS: Final = 200
"""Groups listed; each costs nothing, but a describe costs one call to its coordinator."""
MAX_DESCRIBED_GROUPS: Final = 20
"""Groups described for the group list (members, total lag) and for a topic's answer
(whose "consumed" offsets, their committed offsets summed, the console shows the
advance of as the out rate): one describe per group and answer."""
CALL_TIMEOUT_S: Final = 5.0
"""Longest wait for one peer call: a console poll must answer even if a broker hangs."""


async def _bounded(call: Awaitable[T]) -> T:
    return await asyncio.wait_for(call, CALL_TIMEOUT_S)


async def call_node(broker: Broker, node: int, api: Api[Any, T], body: Any) -> T:
    return await _bounded(broker.peers.call_node(node, api, body))


def code_error(code: int, message: str | None) -> dict[str, Any]:
    return {"error": error_for_code(code).__name__, "message": message or ""}


def error_json(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, MQError):
        return {"error": type(exc).__name__, "message": exc.message}
    if isinstance(exc, TimeoutError):
        return {"error": "Timeout", "message": f"no answer in {CALL_TIMEOUT_S} s"}
    return {"error": type(exc).__name__, "message": str(exc)}


# -- cluster --------------------------------------------------------------------------------------


def is_offline(broker: Broker, state: PartitionState) -> bool:
    return state.leader < 0 or state.leader not in broker.view.brokers


def is_under_replicated(state: PartitionState) -> bool:
    return len(state.isr) < len(state.target)


def _partition_brief(topic: str, index: int, state: PartitionState) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": index,
        "leader": state.leader,
        "replicas": list(state.replicas),
        "isr": list(state.isr),
    }


def cluster(broker: Broker) -> dict[str, Any]:
    """Brokers, controller, counts, and the partitions under-replicated or offline."""
    view = broker.view
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    under: list[dict[str, Any]] = []
    offline: list[dict[str, Any]] = []
    for (topic, index), state in sorted(view.partitions.items()):
        leaders[state.leader] = leaders.get(state.leader, 0) + 1
        for node in state.replicas:
            replicas[node] = replicas.get(node, 0) + 1
        if is_offline(broker, state):
            offline.append(_partition_brief(topic, index, state))
        elif is_under_replicated(state):
            under.append(_partition_brief(topic, index, state))
    controller = view.controller.node_id if view.controller is not None else None
    return {
        "cluster_id": broker.cluster_id,
        "node_id": broker.node_id,
        "controller": controller,
        "brokers": [
            {
                "node_id": info.node_id,
                "host": info.host,
                "port": info.port,
                "controller": info.node_id == controller,
                "leaders": leaders.get(info.node_id, 0),
                "replicas": replicas.get(info.node_id, 0),
                "http_url": info.http_url,  # its console and /metrics; None: no HTTP
            }
            for info in sorted(view.brokers.values())
        ],
        "topics": sum(1 for t in view.topics.values() if not t.internal),
        "internal_topics": sum(1 for t in view.topics.values() if t.internal),
        "partitions": len(view.partitions),
        "under_replicated": under[:MAX_PARTITIONS],
        "offline": offline[:MAX_PARTITIONS],
        "truncated": max(0, len(under) - MAX_PARTITIONS) + max(0, len(offline) - MAX_PARTITIONS),
    }


# -- topics ---------------------------------------------------------------------------------------


def _local_size(broker: Broker, topic: str, index: int) -> int | None:
    partition = broker.partitions.get((topic, index))
    return None if partition is None else partition.log.size_bytes


def topics(broker: Broker) -> dict[str, Any]:
    """Every topic (internal ones last) with its partition count and health, bounded."""
    view = broker.view
    names = sorted(view.topics, key=lambda n: (view.topics[n].internal, n))
    out = []
    for name in names[:MAX_TOPICS]:
        record = view.topics[name]
        states = [view.partitions.get((name, i)) for i in range(record.partitions)]
        known = [s for s in states if s is not None]
        sizes = [_local_size(broker, name, i) for i in range(record.partitions)]
        out.append(
            {
                "name": name,
                "internal": record.internal,
                "queue": qc.is_queue(record.configs),
                "partitions": record.partitions,
                "replication_factor": max((len(s.target) for s in known), default=0),
                "under_replicated": sum(
                    1 for s in known if not is_offline(broker, s) and is_under_replicated(s)
                ),
                "offline": sum(1 for s in known if is_offline(broker, s))
                + (len(states) - len(known)),
                "size_bytes_here": sum(s for s in sizes if s is not None),
            }
        )
    return {"topics": out, "truncated": max(0, len(names) - MAX_TOPICS)}


async def _offsets(
    broker: Broker, topic: str, states: dict[int, PartitionState]
) -> dict[int, dict[str, Any]]:
    """Per partition: start and end (high watermark) offsets from its leader, or an error."""
    by_leader: dict[int, list[int]] = {}
    out: dict[int, dict[str, Any]] = {}
    for index, state in states.items():
        if is_offline(broker, state):
            out[index] = {"error": "LeaderNotAvailableError", "message": "no live leader"}
        else:
            by_leader.setdefault(state.leader, []).append(index)

    async def ask(node: int, indexes: list[int]) -> None:
        found: dict[int, dict[str, Any]] = {i: {} for i in indexes}
        try:
            for key, stamp in (
                ("start_offset", EARLIEST_TIMESTAMP),
                ("end_offset", LATEST_TIMESTAMP),
            ):
                body = {
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {"partition": i, "timestamp": stamp, "current_leader_epoch": -1}
                                for i in indexes
                            ],
                        }
                    ],
                }
                response = await call_node(broker, node, LIST_OFFSETS, body)
                for answer in response["topics"]:
                    for part in answer["partitions"]:
                        entry = found.setdefault(part["partition"], {})
                        if part["error"]:
                            entry.update(code_error(part["error"], part["message"]))
                        else:
                            entry[key] = part["offset"]
        except (MQError, OSError, TimeoutError) as exc:
            found = {i: error_json(exc) for i in indexes}
        out.update(found)

    await asyncio.gather(*(ask(node, indexes) for node, indexes in by_leader.items()))
    return out


async def topic(broker: Broker, name: str) -> dict[str, Any]:
    """One topic: its configs and, per partition, leader, replicas, ISR, offsets, size here."""
    record = broker.view.topics.get(name)
    if record is None:
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    count = min(record.partitions, MAX_PARTITIONS)
    states = {
        i: s for i in range(count) if (s := broker.view.partitions.get((name, i))) is not None
    }
    offsets, consumed = await asyncio.gather(
        _offsets(broker, name, states), _consumed(broker, name)
    )
    partitions = []
    for index in range(count):
        state = states.get(index)
        entry: dict[str, Any] = {"partition": index, "size_bytes": _local_size(broker, name, index)}
        if state is not None:
            entry.update(
                leader=state.leader if not is_offline(broker, state) else None,
                leader_epoch=state.leader_epoch,
                replicas=list(state.replicas),
                isr=list(state.isr),
                offline_replicas=[r for r in state.replicas if r not in broker.view.brokers],
                under_replicated=is_under_replicated(state),
            )
        entry.update(offsets.get(index, {}))
        entry["consumed"] = consumed.get(index, 0)
        partitions.append(entry)
    return {
        "name": name,
        "topic_id": record.topic_id,
        "internal": record.internal,
        "queue": qc.is_queue(record.configs),
        "configs": dict(sorted(record.configs.items())),
        "partitions": partitions,
        "truncated": record.partitions - count,
        "time_ms": int(time.time() * 1000),
    }


# -- groups ---------------------------------------------------------------------------------------


async def groups(broker: Broker) -> dict[str, Any]:
    """Every consumer group (id and state), from every live broker, sorted, bounded; the
    first :data:`MAX_DESCRIBED_GROUPS` with their member count and total lag."""
    listed = await _list_groups(broker)
    shown = listed["groups"]
    ids = [g["group_id"] for g in shown[:MAX_DESCRIBED_GROUPS]]
    described = await asyncio.gather(*(group(broker, g) for g in ids), return_exceptions=True)
    for entry in shown:
        entry.update(members=None, lag=None)
    for entry, result in zip(shown, described, strict=False):
        if not isinstance(result, BaseException):
            entry.update(members=len(result["members"]), lag=result["lag"])
    return listed


async def _list_groups(broker: Broker) -> dict[str, Any]:
    nodes = sorted(broker.view.brokers)
    results = await asyncio.gather(
        *(call_node(broker, n, LIST_GROUPS, {"states": []}) for n in nodes),
        return_exceptions=True,
    )
    found: dict[str, str] = {}
    errors = []
    for node, result in zip(nodes, results, strict=True):
        if isinstance(result, BaseException):
            errors.append({"node_id": node, **error_json(result)})
            continue
        for group in result["groups"]:
            found[group["group_id"]] = group["state"]
    listed = sorted(found.items())
    return {
        "groups": [{"group_id": g, "state": s} for g, s in listed[:MAX_GROUPS]],
        "truncated": max(0, len(listed) - MAX_GROUPS),
        "errors": errors,
    }


async def _fill_end_offsets(broker: Broker, offsets: list[dict[str, Any]]) -> None:
    """The end offsets the coordinator does not know (partitions it does not lead, -1),
    from their leaders."""
    unknown: dict[str, dict[int, PartitionState]] = {}
    for entry in offsets:
        state = broker.view.partitions.get((entry["topic"], entry["partition"]))
        if entry["end_offset"] < 0 and state is not None:
            unknown.setdefault(entry["topic"], {})[entry["partition"]] = state
    found = await asyncio.gather(*(_offsets(broker, t, s) for t, s in unknown.items()))
    ends = {
        (topic, index): answer.get("end_offset", -1)
        for topic, answers in zip(unknown, found, strict=True)
        for index, answer in answers.items()
    }
    for entry in offsets:
        entry["end_offset"] = ends.get((entry["topic"], entry["partition"]), entry["end_offset"])


async def group(broker: Broker, group_id: str) -> dict[str, Any]:
    """A group's members, their assignments, and committed offset and lag per partition."""
    coordinator = await call_node(
        broker, broker.node_id, FIND_COORDINATOR, {"key": group_id, "key_type": 0}
    )
    response = await call_node(
        broker, coordinator["node_id"], DESCRIBE_GROUPS, {"groups": [group_id]}
    )
    for described in response["groups"]:
        if described["error"]:
            raise error_for_code(described["error"])(described["message"])
        if described["state"] == "Dead":
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        offsets: list[dict[str, Any]] = [
            {
                "topic": o["topic"],
                "partition": o["partition"],
                "committed_offset": o["committed_offset"],
                "end_offset": o["high_watermark"],
            }
            for o in sorted(described["offsets"], key=lambda o: (o["topic"], o["partition"]))
        ][:MAX_PARTITIONS]
        await _fill_end_offsets(broker, offsets)
        for entry in offsets:
            committed, end = entry["committed_offset"], entry["end_offset"]
            entry["lag"] = max(0, end - committed) if committed >= 0 and end >= 0 else None
        owner = {
            (topic, p): m["member_id"]
            for m in described["members"]
            for topic, parts in m["assignment"].items()
            for p in parts
        }
        for entry in offsets:
            entry["member_id"] = owner.get((entry["topic"], entry["partition"]))
        return {
            "group_id": described["group_id"],
            "state": described["state"],
            "assignor": described["assignor"],
            "generation_id": described["generation_id"],
            "coordinator": coordinator["node_id"],
            "members": [
                {
                    "member_id": m["member_id"],
                    "group_instance_id": m["group_instance_id"],
                    "client_id": m["client_id"],
                    "client_host": m["client_host"],
                    "topics": sorted(m["topics"]),
                    "assignment": {t: sorted(p) for t, p in sorted(m["assignment"].items())},
                }
                for m in described["members"]
            ],
            "offsets": offsets,
            "lag": sum(o["lag"] or 0 for o in offsets),
            "time_ms": int(time.time() * 1000),
        }
    raise GroupIdNotFoundError(f"the coordinator did not describe group {group_id!r}")


async def _consumed(broker: Broker, topic: str) -> dict[int, int]:
    """Per partition, the sum of the committed offsets of the groups that read ``topic``
    (the first :data:`MAX_DESCRIBED_GROUPS` groups by name): its advance is what they
    consumed."""
    try:
        listed = await _list_groups(broker)
    except (MQError, OSError, TimeoutError):
        return {}
    ids = [g["group_id"] for g in listed["groups"][:MAX_DESCRIBED_GROUPS]]
    described = await asyncio.gather(*(group(broker, g) for g in ids), return_exceptions=True)
    out: dict[int, int] = {}
    for result in described:
        if isinstance(result, BaseException):
            continue
        for entry in result["offsets"]:
            if entry["topic"] == topic and entry["committed_offset"] >= 0:
                index = entry["partition"]
                out[index] = out.get(index, 0) + entry["committed_offset"]
    return out

"""The admin client: topics, configs, groups, offsets, records.

::

    async with Admin(bootstrap="127.0.0.1:9292") as admin:
        await admin.create_topic("events", partitions=3, replication_factor=1)
        print(await admin.describe_topic("events"))
        await admin.delete_topic("events")

Every method raises the broker's error for what it asked (a per-topic or
per-partition error code turned into its :mod:`mq.errors` class). Group
requests go to the group's coordinator, topic requests to any broker,
record and offset requests to each partition's leader; reassignments and
leader elections to any broker, which hands them to the controller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Unpack

from mq.acl.model import MATCH_ALL, AclBinding, AclFilter
from mq.client import acls, users
from mq.client.admin_quotas import QuotaAdmin
from mq.client.client import Client
from mq.client.metadata import http_url
from mq.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, by_topic, list_offsets
from mq.client.producer_states import ProducerState, describe_producers
from mq.client.security import SecurityOptions, security_from
from mq.client.types import TopicPartition
from mq.errors import (
    ElectionNotNeededError,
    MQError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from mq.wire.apis_cluster import (
    ALTER_PARTITION_REASSIGNMENTS,
    ELECT_LEADERS,
    LIST_PARTITION_REASSIGNMENTS,
    TopicPartitionResults,
)
from mq.wire.apis_core import (
    ALTER_CONFIGS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    ConfigEntry,
)
from mq.wire.apis_groups import DESCRIBE_GROUPS, FIND_COORDINATOR, LIST_GROUPS, OFFSET_COMMIT
from mq.wire.limits import validate_topic_name


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicDescription:
    name: str
    internal: bool
    partitions: list[PartitionDescription]
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterDescription:
    """The live brokers, the controller and every topic's partitions (internal ones too)."""

    cluster_id: str | None
    controller_id: int
    brokers: list[int]
    topics: dict[str, list[PartitionDescription]]
    http_urls: dict[int, str] = field(default_factory=dict)
    """Each broker's HTTP listener (``/metrics``, health, console) by node id, for the
    brokers that have one (a Prometheus service discovery's targets)."""


@dataclass(frozen=True)
class PartitionReassignment:
    """A move of a partition in progress: ``replicas`` lists the target's replicas first,
    then those being removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    topics: list[str]
    assignment: set[TopicPartition]


@dataclass(frozen=True)
class PartitionLag:
    """Where a group is in one partition (``lag`` is None when either side is unknown)."""

    topic: str
    partition: int
    committed_offset: int
    high_watermark: int

    @property
    def lag(self) -> int | None:
        if self.committed_offset < 0 or self.high_watermark < 0:
            return None
        return max(0, self.high_watermark - self.committed_offset)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    assignor: str
    generation_id: int
    members: list[MemberDescription]
    offsets: list[PartitionLag]


def _raise_for(code: int, message: str | None) -> None:
    if code:
        raise error_for_code(code)(message)


def _by_topic_body(items: Iterable[tuple[TopicPartition, dict[str, Any]]]) -> list[Any]:
    """``[{"name": topic, "partitions": [fields, ...]}, ...]`` from (partition, fields) pairs."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, fields in items:
        topics.setdefault(tp.topic, []).append({"partition": tp.partition, **fields})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def _named(partitions: Iterable[TopicPartition] | None) -> list[dict[str, Any]] | None:
    """``[{"name": topic, "partitions": [index, ...]}, ...]``, or None for None (all)."""
    if partitions is None:
        return None
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def _partition_results(
    topics: list[TopicPartitionResults],
) -> dict[TopicPartition, MQError | None]:
    return {
        TopicPartition(t["name"], p["partition"]): (
            error_for_code(p["error"])(p["message"]) if p["error"] else None
        )
        for t in topics
        for p in t["partitions"]
    }


class Admin(QuotaAdmin):
    """Administrative operations on a cluster; see the module docstring."""

    def __init__(
        self,
        bootstrap: str = "127.0.0.1:9292",
        *,
        client_id: str = "mq-admin",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        **security: Unpack[SecurityOptions],
    ) -> None:
        self._timeout_ms = request_timeout_ms
        self._client = Client(
            bootstrap,
            client_id=client_id,
            request_timeout_s=request_timeout_ms / 1000,
            retry_backoff_s=retry_backoff_ms / 1000,
            security=security_from(security),
        )

    async def start(self) -> None:
        await self._client.start()

    async def stop(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- topics -------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
        exist_ok: bool = False,
    ) -> bool:
        """Create a topic (-1: the broker's default partitions / replication factor).

        Returns True if the topic was created. With ``exist_ok`` a topic of that name
        that already exists is no error (False is returned), whatever its partitions,
        replication factor and settings: as Kafka's ``--if-not-exists``, the existing
        topic is neither compared nor changed (``describe_topic`` shows what it has).
        """
        validate_topic_name(name)  # before the request: a too-long name fails the schema
        body = {
            "topics": [
                {
                    "name": name,
                    "partitions": partitions,
                    "replication_factor": replication_factor,
                    "configs": dict(configs or {}),
                }
            ],
            "timeout_ms": self._timeout_ms,
            "validate_only": validate_only,
        }
        response = await self._client.call_any(CREATE_TOPICS, body)
        created = True
        for topic in response["topics"]:
            if exist_ok and topic["error"] == TopicAlreadyExistsError.code:
                created = False
                continue
            _raise_for(topic["error"], topic["message"])
        self._client.add_topics([name])
        return created

    async def delete_topic(self, name: str) -> None:
        response = await self._client.call_any(
            DELETE_TOPICS, {"topics": [name], "timeout_ms": self._timeout_ms}
        )
        for topic in response["topics"]:
            _raise_for(topic["error"], topic["message"])

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        """Every topic name, sorted (internal ones like ``__consumer_offsets`` on request)."""
        response = await self._client.fetch_all_metadata()
        return sorted(
            t["name"]
            for t in response["topics"]
            if not t["error"] and (include_internal or not t.get("internal"))
        )

    async def describe_topic(self, name: str) -> TopicDescription:
        """Partitions with leaders, replicas and ISR, and the topic's effective configs."""
        self._client.add_topics([name])
        await self._client.refresh_metadata()
        metadata = self._client.metadata
        parts = metadata.partitions_for(name)
        if parts is None:
            code = metadata.topic_errors.get(name, UnknownTopicOrPartitionError.code)
            why = metadata.topic_messages.get(name)  # the broker's: who may not do what
            raise error_for_code(code)(
                f"cannot describe topic {name!r}" + (f": {why}" if why else "")
            )
        described = []
        for index in parts:
            info = metadata.partition(TopicPartition(name, index))
            assert info is not None
            described.append(
                PartitionDescription(
                    index,
                    info.leader,
                    info.leader_epoch,
                    info.replicas,
                    info.isr,
                    info.offline_replicas,
                )
            )
        configs = {e["name"]: e["value"] for e in await self.describe_configs(name)}
        return TopicDescription(name, name in metadata.internal_topics, described, configs)

    async def describe_configs(
        self, topic: str, keys: Iterable[str] | None = None
    ) -> list[ConfigEntry]:
        """The topic's config entries (name, value, is_default, read_only, sensitive)."""
        body = {"topics": [{"name": topic, "keys": None if keys is None else list(keys)}]}
        response = await self._client.call_any(DESCRIBE_CONFIGS, body)
        for described in response["topics"]:
            _raise_for(described["error"], described["message"])
            return list(described["configs"])
        return []

    async def alter_configs(
        self, topic: str, configs: Mapping[str, str | None], *, validate_only: bool = False
    ) -> None:
        """Set the named configs (None: back to the default); others stay as they are."""
        body = {
            "topics": [{"name": topic, "configs": dict(configs)}],
            "validate_only": validate_only,
        }
        response = await self._client.call_any(ALTER_CONFIGS, body)
        for result in response["topics"]:
            _raise_for(result["error"], result["message"])

    # -- SCRAM users (issue 19; mq.client.users) ---------------------------------------

    async def add_user(
        self,
        name: str,
        password: str,
        *,
        mechanism: str = "SCRAM-SHA-256",
        iterations: int = users.DEFAULT_ITERATIONS,
    ) -> None:
        """Add a SCRAM user, or set a new password (the password never leaves the client)."""
        await users.alter(
            self._client, [users.scram_upsertion(name, password, mechanism, iterations)], []
        )

    async def delete_user(self, name: str, *, mechanism: str | None = None) -> None:
        """Delete a user's credential for ``mechanism`` (None: all of them)."""
        await users.alter(self._client, [], [{"user": name, "mechanism": mechanism}])

    async def list_users(self) -> dict[str, dict[str, int]]:
        """Every SCRAM user: mechanism → iterations."""
        return await users.describe(self._client)

    async def describe_cluster(self) -> ClusterDescription:
        """The live brokers, the controller, and the partitions of every topic."""
        response = await self._client.fetch_all_metadata()
        topics = {
            t["name"]: [
                PartitionDescription(
                    p["partition"],
                    p["leader"],
                    p["leader_epoch"],
                    tuple(p["replicas"]),
                    tuple(p["isr"]),
                    tuple(p["offline_replicas"]),
                )
                for p in sorted(t["partitions"], key=lambda p: p["partition"])
            ]
            for t in sorted(response["topics"], key=lambda t: t["name"])
            if not t["error"]
        }
        urls = {b["node_id"]: http_url(b.get("http")) for b in response["brokers"]}
        return ClusterDescription(
            response["cluster_id"],
            response["controller_id"],
            sorted(b["node_id"] for b in response["brokers"]),
            topics,
            {node: url for node, url in sorted(urls.items()) if url is not None},
        )

    # -- reassignment and leaders -----------------------------------------------------------------

    async def reassign_partitions(
        self, moves: Mapping[TopicPartition, Sequence[int] | None]
    ) -> None:
        """Move partitions to new replica lists (preferred leader first); None cancels the
        move in progress (back to the original replicas).

        Returns once the controller has started the moves: each completes in the
        background when its new replicas have caught up (:meth:`list_reassignments`),
        and leadership then goes to the new preferred leader. Raises
        INVALID_REPLICA_ASSIGNMENT for an empty list, a broker named twice or one
        that is not alive, NO_REASSIGNMENT_IN_PROGRESS for a cancel with nothing to cancel.
        """
        body = {
            "topics": _by_topic_body(
                (tp, {"replicas": None if replicas is None else list(replicas)})
                for tp, replicas in moves.items()
            ),
            "timeout_ms": self._timeout_ms,
        }
        response = await self._client.call_any(ALTER_PARTITION_REASSIGNMENTS, body)
        for error in _partition_results(response["topics"]).values():
            if error is not None:
                raise error

    async def list_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The moves in progress (of ``partitions``; None: of all)."""
        body = {"topics": _named(partitions), "timeout_ms": self._timeout_ms}
        response = await self._client.call_any(LIST_PARTITION_REASSIGNMENTS, body)
        return {
            TopicPartition(t["name"], p["partition"]): PartitionReassignment(
                tuple(p["replicas"]), tuple(p["adding"]), tuple(p["removing"])
            )
            for t in response["topics"]
            for p in t["partitions"]
        }

    async def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> list[TopicPartition]:
        """Hand each partition's leadership to its preferred leader (its first replica);
        the partitions whose leader changed.

        ``partitions`` None: every partition not led by its preferred leader. One
        already led by it is left as it is; raises PREFERRED_LEADER_NOT_AVAILABLE
        if a preferred leader is not alive or not in sync (the others are elected).
        """
        body = {"topics": _named(partitions), "timeout_ms": self._timeout_ms}
        response = await self._client.call_any(ELECT_LEADERS, body)
        elected = []
        for tp, error in _partition_results(response["topics"]).items():
            if error is None:
                elected.append(tp)
            elif not isinstance(error, ElectionNotNeededError):
                raise error
        return sorted(elected)

    # -- records and offsets ----------------------------------------------------------------------

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], producer_ids: Iterable[int] | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        """Per partition, the idempotent producers its leader remembers (only
        ``producer_ids`` if given): id, epoch, last sequence, newest batch's time."""
        return await describe_producers(
            self._client, partitions, producer_ids, timeout_s=self._timeout_ms / 1000
        )

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Delete every record below each offset (-1: the high watermark); new log starts."""
        self._client.add_topics(tp.topic for tp in offsets)
        await self._client.wait_for_topics({tp.topic for tp in offsets}, self._timeout_ms / 1000)
        by_leader = self._client.metadata.partitions_by_leader(offsets)
        if None in by_leader:
            raise UnknownTopicOrPartitionError(f"no leader for {by_leader[None]}")

        async def ask(node: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            topics: dict[str, list[dict[str, int]]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(
                    {"partition": tp.partition, "offset": offsets[tp]}
                )
            body = {
                "topics": [{"name": n, "partitions": p} for n, p in topics.items()],
                "timeout_ms": self._timeout_ms,
            }
            response = await self._client.call(node, DELETE_RECORDS, body)
            out = {}
            for topic in response["topics"]:
                for part in topic["partitions"]:
                    _raise_for(part["error"], part["message"])
                    out[TopicPartition(topic["name"], part["partition"])] = part["low_watermark"]
            return out

        results = await asyncio.gather(
            *(ask(node, tps) for node, tps in by_leader.items() if node is not None)
        )
        return {tp: low for result in results for tp, low in result.items()}

    async def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: Literal["earliest", "latest"] | int = "latest",
    ) -> dict[TopicPartition, int]:
        """Per partition: the log start ("earliest"), high watermark ("latest") or the
        first offset at or after a time in ms (-1 when no record is that recent)."""
        stamp = (
            EARLIEST_TIMESTAMP
            if spec == "earliest"
            else LATEST_TIMESTAMP
            if spec == "latest"
            else int(spec)
        )
        found = await list_offsets(self._client, dict.fromkeys(partitions, stamp))
        return {tp: offset for tp, (offset, _) in found.items()}

    async def topic_partitions(self, topic: str) -> list[TopicPartition]:
        await self._client.wait_for_topics([topic], self._timeout_ms / 1000)
        return [TopicPartition(topic, p) for p in self._client.metadata.partitions_for(topic) or ()]

    # -- ACLs (mq.client.acls) ------------------------------------------------------------------

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Add ACL bindings (needs ALTER on the cluster)."""
        await acls.create_acls(self._client, bindings)

    async def describe_acls(self, acl_filter: AclFilter = MATCH_ALL) -> list[AclBinding]:
        """The ACL bindings a filter selects (needs DESCRIBE on the cluster)."""
        return await acls.describe_acls(self._client, acl_filter)

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Remove the ACL bindings the filters select; returns them (ALTER on the cluster)."""
        return await acls.delete_acls(self._client, filters)

    # -- groups --------------------------------------------------------------------------------

    async def _coordinator_call(self, group_id: str, api: Any, body: Any) -> Any:
        found = await self._client.call_any(FIND_COORDINATOR, {"key": group_id, "key_type": 0})
        return await self._client.call_address((found["host"], found["port"]), api, body)

    async def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str]]:
        """``(group_id, state)`` of every group on every known broker, sorted."""
        await self._client.refresh_metadata()
        body = {"states": list(states)}
        nodes = list(self._client.metadata.brokers)
        responses = await asyncio.gather(
            *(self._client.call(node, LIST_GROUPS, body) for node in nodes)
        )
        return sorted({(g["group_id"], g["state"]) for r in responses for g in r["groups"]})

    async def describe_group(self, group_id: str) -> GroupDescription:
        """Members with their assignments, and per-partition committed offsets and lag."""
        response = await self._coordinator_call(group_id, DESCRIBE_GROUPS, {"groups": [group_id]})
        for group in response["groups"]:
            _raise_for(group["error"], group["message"])
            members = [
                MemberDescription(
                    m["member_id"],
                    m["group_instance_id"],
                    m["client_id"],
                    m["client_host"],
                    list(m["topics"]),
                    {TopicPartition(t, p) for t, parts in m["assignment"].items() for p in parts},
                )
                for m in group["members"]
            ]
            offsets = [
                PartitionLag(o["topic"], o["partition"], o["committed_offset"], o["high_watermark"])
                for o in group["offsets"]
            ]
            return GroupDescription(
                group["group_id"],
                group["state"],
                group["assignor"],
                group["generation_id"],
                members,
                offsets,
            )
        raise MQError(f"the coordinator did not describe group {group_id!r}")

    async def reset_offsets(
        self,
        group_id: str,
        topic: str,
        to: Literal["earliest", "latest"] | int,
        partitions: Iterable[int] | None = None,
    ) -> dict[TopicPartition, int]:
        """Commit new offsets for a group with no active members; returns them.

        ``to``: "earliest", "latest" or an offset. The coordinator refuses
        (NON_EMPTY_GROUP / UNKNOWN_MEMBER_ID) while the group has members.
        """
        all_tps = await self.topic_partitions(topic)
        tps = all_tps if partitions is None else [TopicPartition(topic, p) for p in partitions]
        if isinstance(to, int):
            offsets = dict.fromkeys(tps, to)
        else:
            offsets = await self.list_offsets(tps, to)
        body = {
            "group_id": group_id,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition": p, "offset": offsets[TopicPartition(name, p)]} for p in parts
                    ],
                }
                for name, parts in by_topic(offsets).items()
            ],
        }
        response = await self._coordinator_call(group_id, OFFSET_COMMIT, body)
        for result in response["topics"]:
            for part in result["partitions"]:
                _raise_for(part["error"], part["message"])
        return offsets

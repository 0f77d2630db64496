"""Handlers of the admin APIs: api_versions, metadata, topics, configs, delete_records.

Per-topic failures are answered per topic (error code and message); only a
malformed request fails as a whole. Every per-entry loop gives the event loop a
turn every :data:`~mq.broker.pacing.ENTRIES_PER_TURN` entries.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from mq.broker.broker import Broker
from mq.broker.catalog import (
    INTERNAL_TOPICS,
    TOPIC_CONFIG_KEYS,
    split_topic_configs,
    topic_log_config,
)
from mq.broker.context import RequestContext, duplicate_names, duplicate_partitions, set_error
from mq.broker.listeners import address_on
from mq.broker.pacing import Pacer
from mq.errors import (
    InvalidRequestError,
    InvalidTopicError,
    LeaderNotAvailableError,
    MQError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from mq.queues.config import DEFAULTS as QUEUE_DEFAULTS
from mq.queues.config import is_queue
from mq.replication.membership import BrokerInfo
from mq.replication.placement import PartitionState
from mq.storage.config import UNLIMITED_AS_MINUS_ONE
from mq.storage.log import Log
from mq.wire.apis_core import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    BrokerHttpEndpoint,
    ConfigEntry,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
    api_versions_body,
)

_NO_STATE = PartitionState((), -1, 0, ())


def _failed(name: str, exc: MQError) -> dict[str, Any]:
    return {"name": name, "error": exc.code, "message": exc.message}


async def api_versions(
    broker: Broker, ctx: RequestContext, body: ApiVersionsRequest
) -> ApiVersionsResponse:
    """The APIs this broker serves (registered ones without a handler yet are left out)."""
    answer = api_versions_body()
    answer["apis"] = [a for a in answer["apis"] if a["key"] in broker.served_apis]
    return answer


async def metadata(broker: Broker, ctx: RequestContext, body: MetadataRequest) -> MetadataResponse:
    """Brokers, controller, and per partition leader, replicas and ISR, from the view."""
    view = broker.view
    # a name asked twice is answered once, as Kafka's metadata request is a set
    asked = body["topics"]
    names = sorted(view.topics) if asked is None else list(dict.fromkeys(asked))
    # names this broker's view lacks: one read of the store for all (not one each)
    known = {} if asked is None else await broker.topics.catch_up_on_many(names)
    topics: list[MetadataTopic] = []
    pacer = Pacer()
    for name in names:
        if pacer.due():  # up to 100,000 names: other clients get turns
            await asyncio.sleep(0)
        info = view.topics.get(name) or known.get(name)
        if info is None and not body["allow_auto_topic_creation"]:
            # answered without raising: an error raised and caught per name made this
            # loop ~1.7 times as long for 100,000 unknown names (issue 18)
            topics.append(
                {
                    "name": name,
                    "error": UnknownTopicOrPartitionError.code,
                    "message": f"topic {name!r} does not exist",
                    "internal": False,
                    "partitions": [],
                }
            )
            continue
        try:
            if info is None:
                info = await broker.topics.ensure_topic(name)
        except MQError as exc:
            failed: MetadataTopic = {
                "name": name,
                "error": exc.code,
                "message": exc.message,
                "internal": False,
                "partitions": [],
            }
            topics.append(failed)
            continue
        partitions: list[MetadataPartition] = []
        for index in range(info.partitions):
            state = view.partitions.get((name, index))
            if state is None:
                continue
            offline = state.leader < 0
            partitions.append(
                {
                    "partition": index,
                    "error": LeaderNotAvailableError.code if offline else 0,
                    "leader": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "replicas": list(state.replicas),
                    "isr": list(state.isr),
                    "offline_replicas": [r for r in state.replicas if r not in view.brokers],
                }
            )
        topics.append(
            {
                "name": name,
                "error": 0,
                "message": None,
                "internal": info.internal,
                "partitions": partitions,
            }
        )
    brokers = dict(view.brokers)
    host, port = broker.advertised
    me = BrokerInfo(broker.node_id, host, port, 0, broker.endpoints, broker.http_endpoint)
    brokers.setdefault(broker.node_id, me)
    return {
        "cluster_id": broker.cluster_id,
        "controller_id": view.controller.node_id if view.controller else -1,
        "brokers": [
            {
                "node_id": b.node_id,
                "host": host,
                "port": port,
                "rack": None,
                "http": _http(b),
            }
            for b in sorted(brokers.values(), key=lambda b: b.node_id)
            for address in [address_on(b.endpoints, ctx.listener, (b.host, b.port))]
            if address is not None
            for host, port in [address]
        ],
        "topics": topics,
    }


def _http(info: BrokerInfo) -> BrokerHttpEndpoint | None:
    """A broker's HTTP listener as the metadata answer lists it (issue 21)."""
    http = info.http
    return None if http is None else {"host": http.host, "port": http.port, "scheme": http.scheme}


def _repeated(name: str, api: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"topic {name!r} appears more than once in the {api} request: none of its entries "
        "was applied"
    )


async def create_topics(
    broker: Broker, ctx: RequestContext, body: CreateTopicsRequest
) -> CreateTopicsResponse:
    """Create each topic; a name given twice is refused (INVALID_REQUEST), as in Kafka."""
    response: CreateTopicsResponse = {"topics": []}
    repeated = duplicate_names(t["name"] for t in body["topics"])
    pacer = Pacer()
    for topic in body["topics"]:
        if pacer.due():
            await asyncio.sleep(0)
        try:
            if topic["name"] in repeated:
                raise _repeated(topic["name"], "create_topics")
            info = await broker.topics.create_topic(
                topic["name"],
                topic["partitions"],
                topic["replication_factor"],
                topic["configs"],
                validate_only=body["validate_only"],
                internal=topic["name"] in INTERNAL_TOPICS,
                cap_to_live=topic["name"] in INTERNAL_TOPICS,
            )
        except MQError as exc:
            response["topics"].append(_failed(topic["name"], exc))  # type: ignore[arg-type]
            continue
        response["topics"].append(
            {
                "name": info.name,
                "error": 0,
                "message": None,
                "partitions": info.partitions,
                "replication_factor": len(
                    broker.view.partitions.get((info.name, 0), _NO_STATE).replicas
                )
                or topic["replication_factor"],
            }
        )
    return response


async def delete_topics(
    broker: Broker, ctx: RequestContext, body: DeleteTopicsRequest
) -> DeleteTopicsResponse:
    """Delete each topic; a name given twice is refused (INVALID_REQUEST)."""
    response: DeleteTopicsResponse = {"topics": []}
    repeated = duplicate_names(body["topics"])
    pacer = Pacer()
    for name in body["topics"]:
        if pacer.due():
            await asyncio.sleep(0)
        try:
            if name in repeated:
                raise _repeated(name, "delete_topics")
            await broker.topics.delete_topic(name)
        except MQError as exc:
            response["topics"].append(_failed(name, exc))  # type: ignore[arg-type]
            continue
        response["topics"].append({"name": name, "error": 0, "message": None})
    return response


async def describe_configs(
    broker: Broker, ctx: RequestContext, body: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    """Every topic setting with its effective value, marking those left at the default."""
    response: DescribeConfigsResponse = {"topics": []}
    repeated = duplicate_names(t["name"] for t in body["topics"])
    pacer = Pacer()
    for topic in body["topics"]:
        if pacer.due():
            await asyncio.sleep(0)
        if topic["name"] in repeated:
            response["topics"].append(
                _failed(topic["name"], _repeated(topic["name"], "describe_configs"))  # type: ignore[arg-type]
            )
            continue
        info = await broker.topics.catch_up_on(topic["name"])
        if info is None:
            exc = UnknownTopicOrPartitionError(f"topic {topic['name']!r} does not exist")
            response["topics"].append(_failed(topic["name"], exc))  # type: ignore[arg-type]
            continue
        log_configs, _ = split_topic_configs(info.configs)
        effective = topic_log_config(broker.config.log, log_configs)
        entries: list[ConfigEntry] = []
        queue = is_queue(info.configs)
        wanted = None if topic["keys"] is None else frozenset(topic["keys"])
        for key in sorted(TOPIC_CONFIG_KEYS):
            if wanted is not None and key not in wanted:
                continue
            if key in QUEUE_DEFAULTS and not queue and topic["keys"] is None:
                continue  # a plain topic: its queue settings would only confuse
            value: Any
            if key == "min.insync.replicas":
                value = broker.min_insync_replicas(info)
            elif key == "unclean.leader.election.enable":
                value = info.configs.get(key, "false")
            elif key in QUEUE_DEFAULTS:
                value = info.configs.get(key, QUEUE_DEFAULTS[key])
            else:
                field = key.replace(".", "_")
                value = getattr(effective, field)
                value = getattr(value, "value", value)
                if value is None and field in UNLIMITED_AS_MINUS_ONE:
                    value = -1  # no limit, shown as Kafka shows it
            entries.append(
                {
                    "name": key,
                    "value": None if value is None else str(value),
                    "is_default": key not in info.configs,
                    "read_only": False,
                    "sensitive": False,
                }
            )
        response["topics"].append(
            {"name": info.name, "error": 0, "message": None, "configs": entries}
        )
    return response


async def alter_configs(
    broker: Broker, ctx: RequestContext, body: AlterConfigsRequest
) -> AlterConfigsResponse:
    """Validate every topic's changes, then write all the valid ones in one store
    transaction (:meth:`~mq.broker.broker.Broker.alter_topics_configs`): a request
    naming many topics costs one metadata write, not one per topic. A topic named
    twice is refused (INVALID_REQUEST), as Kafka refuses duplicate resources."""
    repeated = duplicate_names(t["name"] for t in body["topics"])
    errors: dict[str, MQError] = {}
    changes: dict[str, dict[str, str | None]] = {}
    pacer = Pacer()
    for topic in body["topics"]:
        if pacer.due():  # up to 100,000 entries: other clients get turns
            await asyncio.sleep(0)
        name = topic["name"]
        if name in repeated:
            errors[name] = _repeated(name, "alter_configs")
        else:
            changes[name] = topic["configs"]
    errors.update(
        await broker.topics.alter_topics_configs(changes, validate_only=body["validate_only"])
    )
    response: AlterConfigsResponse = {"topics": []}
    for topic in body["topics"]:
        if pacer.due():
            await asyncio.sleep(0)
        failure = errors.get(topic["name"])
        if failure is not None:
            response["topics"].append(_failed(topic["name"], failure))  # type: ignore[arg-type]
        else:
            response["topics"].append({"name": topic["name"], "error": 0, "message": None})
    return response


async def delete_records(
    broker: Broker, ctx: RequestContext, body: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    """Move log start offsets forward (offset -1: to the high watermark)."""
    response: DeleteRecordsResponse = {"topics": []}
    repeated = duplicate_partitions(body["topics"])
    pacer = Pacer()
    for topic in body["topics"]:
        results: list[Any] = []
        response["topics"].append({"name": topic["name"], "partitions": results})
        for part in topic["partitions"]:
            if pacer.due():
                await asyncio.sleep(0)
            result: dict[str, Any] = {"partition": part["partition"], "error": 0, "message": None}
            results.append(result)
            try:
                if repeated and (topic["name"], part["partition"]) in repeated:
                    raise InvalidRequestError(
                        f"partition {topic['name']}-{part['partition']} appears more than once "
                        "in the delete_records request"
                    )
                info = broker.topic(topic["name"])
                if info is not None and info.internal:
                    raise InvalidTopicError(
                        f"records of internal topic {info.name} are the broker's"
                    )
                partition = broker.leader_partition(topic["name"], part["partition"])
                target = partition.high_watermark if part["offset"] == -1 else part["offset"]
                if target > partition.high_watermark:
                    raise OffsetOutOfRangeError(
                        f"{target} is past the high watermark {partition.high_watermark}"
                    )
                await partition.writer.call(partial(Log.advance_log_start, offset=target))
                await partition.writer.flush()  # the new log start is on disk before the answer
                result["low_watermark"] = partition.log.log_start_offset
            except MQError as exc:
                set_error(result, exc)
    return response

"""Cluster and admin APIs: api_versions, authenticate, metadata, topics, configs, records.

Each TypedDict below is a body on the wire (a msgpack map) and the type its
handler receives; :func:`~mq.wire.registry.define_api` binds a pair of them to
an API key. Keys follow Kafka's numbering (see :mod:`mq.wire.apis`).
Per-topic and per-partition results carry an ``error`` code (0 = none) and
an optional ``message``; a failure of the whole request is the envelope's
error code instead.
"""

from __future__ import annotations

from typing import Annotated, TypedDict

from mq.wire import limits
from mq.wire.registry import all_apis, define_api
from mq.wire.schema import (
    I16,
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

ApiKey = Annotated[int, Range(0, limits.I16_MAX)]
Port = Annotated[int, Range(0, 65_535)]
NodeIds = Annotated[list[I32], Len(0, limits.MAX_BROKERS)]
AuthBytes = Annotated[bytes, Len(0, limits.MAX_AUTH_BYTES)]

# -- api_versions (18): what this broker speaks; always answered, even before authenticate


class ApiVersionsRequest(TypedDict):
    client_software_name: Annotated[Name, Default("")]
    client_software_version: Annotated[Name, Default("")]


class ApiVersion(TypedDict):
    key: ApiKey
    name: Name
    min_version: ApiKey
    max_version: ApiKey


class ApiVersionsResponse(TypedDict):
    apis: Annotated[list[ApiVersion], Len(0, limits.MAX_APIS)]


API_VERSIONS = define_api(18, "api_versions", ApiVersionsRequest, ApiVersionsResponse)


def api_versions_body() -> ApiVersionsResponse:
    """The api_versions response body: every registered API and its version range."""
    return {
        "apis": [
            {
                "key": a.key,
                "name": a.name,
                "min_version": a.min_version,
                "max_version": a.max_version,
            }
            for a in all_apis()
        ]
    }


# -- authenticate (36): SASL exchange (e.g. SCRAM-SHA-256), right after api_versions.
# The client repeats it with each SASL message until ``complete``; the handler
# comes with the security work, the protocol slot and codes exist now.


class AuthenticateRequest(TypedDict):
    mechanism: Name
    """"SCRAM-SHA-256", "SCRAM-SHA-512" or "PLAIN"; the same on every step."""
    auth_bytes: AuthBytes


class AuthenticateResponse(TypedDict):
    auth_bytes: AuthBytes
    complete: bool
    session_lifetime_ms: Annotated[NonNegI64, Default(0)]
    """0: the session does not expire; otherwise re-authenticate before it does."""


AUTHENTICATE = define_api(36, "authenticate", AuthenticateRequest, AuthenticateResponse)

# -- metadata (3): brokers, controller, topics -> partitions -> leader/replicas/isr


class MetadataRequest(TypedDict):
    topics: Annotated[list[TopicName] | None, Len(0, limits.MAX_TOPICS), Default(None)]
    """None: every topic."""
    allow_auto_topic_creation: Annotated[bool, Default(False)]


class BrokerHttpEndpoint(TypedDict):
    host: Name
    port: Port
    scheme: Name
    """"http" (the scheme of the URL to use)."""


class MetadataBroker(TypedDict):
    node_id: I32
    host: Name
    port: Port
    rack: Annotated[Name | None, Default(None)]
    http: Annotated[BrokerHttpEndpoint | None, Default(None)]
    """The broker's HTTP listener (``/metrics``, health, console) when it has one (issue
    21). Optional: an older client ignores it, an older broker's answer lacks it (None)."""


class MetadataPartition(TypedDict):
    partition: PartitionId
    error: ErrorCode
    leader: I32
    """-1 while there is no leader."""
    leader_epoch: I32
    replicas: NodeIds
    isr: NodeIds
    offline_replicas: Annotated[NodeIds, Default([])]


class MetadataTopic(TypedDict):
    name: TopicName
    error: ErrorCode
    message: ErrorMessage
    """Why ``error`` (an authorization refusal names principal, operation and topic)."""
    internal: Annotated[bool, Default(False)]
    partitions: Annotated[list[MetadataPartition], Len(0, limits.MAX_PARTITIONS)]


class MetadataResponse(TypedDict):
    cluster_id: Name | None
    controller_id: I32
    brokers: Annotated[list[MetadataBroker], Len(0, limits.MAX_BROKERS)]
    topics: Annotated[list[MetadataTopic], Len(0, limits.MAX_TOPICS)]


METADATA = define_api(3, "metadata", MetadataRequest, MetadataResponse)

# -- create_topics (19) / delete_topics (20) ---------------------------------------------------


class CreatableTopic(TypedDict):
    name: TopicName
    partitions: Annotated[int, Range(-1, limits.MAX_PARTITIONS)]
    """-1: the broker's default."""
    replication_factor: Annotated[int, Range(-1, limits.I16_MAX)]
    """-1: the broker's default."""
    configs: Annotated[dict[Name, Text], Len(0, limits.MAX_CONFIGS), Default({})]


class CreateTopicsRequest(TypedDict):
    topics: Annotated[list[CreatableTopic], Len(0, limits.MAX_TOPICS)]
    timeout_ms: NonNegI32
    validate_only: Annotated[bool, Default(False)]


class CreatedTopic(TypedDict):
    name: TopicName
    error: ErrorCode
    message: ErrorMessage
    partitions: Annotated[I32, Default(-1)]
    replication_factor: Annotated[I16, Default(-1)]


class CreateTopicsResponse(TypedDict):
    topics: Annotated[list[CreatedTopic], Len(0, limits.MAX_TOPICS)]


CREATE_TOPICS = define_api(19, "create_topics", CreateTopicsRequest, CreateTopicsResponse)


class TopicResult(TypedDict):
    """The outcome for one topic of delete_topics or alter_configs."""

    name: TopicName
    error: ErrorCode
    message: ErrorMessage


class DeleteTopicsRequest(TypedDict):
    topics: Annotated[list[TopicName], Len(0, limits.MAX_TOPICS)]
    timeout_ms: NonNegI32


class DeleteTopicsResponse(TypedDict):
    topics: Annotated[list[TopicResult], Len(0, limits.MAX_TOPICS)]


DELETE_TOPICS = define_api(20, "delete_topics", DeleteTopicsRequest, DeleteTopicsResponse)

# -- delete_records (21): advance partitions' log start offsets --------------------------------


class DeleteRecordsPartition(TypedDict):
    partition: PartitionId
    offset: Annotated[int, Range(-1, limits.I64_MAX)]
    """Delete every record below this offset; -1: below the high watermark."""


class DeleteRecordsTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[DeleteRecordsPartition], Len(0, limits.MAX_PARTITIONS)]


class DeleteRecordsRequest(TypedDict):
    topics: Annotated[list[DeleteRecordsTopic], Len(0, limits.MAX_TOPICS)]
    timeout_ms: NonNegI32


class DeletedRecordsPartition(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    low_watermark: Annotated[I64, Default(-1)]
    """The partition's log start offset after the deletion."""


class DeletedRecordsTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[DeletedRecordsPartition], Len(0, limits.MAX_PARTITIONS)]


class DeleteRecordsResponse(TypedDict):
    topics: Annotated[list[DeletedRecordsTopic], Len(0, limits.MAX_TOPICS)]


DELETE_RECORDS = define_api(21, "delete_records", DeleteRecordsRequest, DeleteRecordsResponse)

# -- describe_configs (32) / alter_configs (33): topic configs ---------------------------------


class DescribeConfigsTopic(TypedDict):
    name: TopicName
    keys: Annotated[list[Name] | None, Len(0, limits.MAX_CONFIGS), Default(None)]
    """None: every config of the topic."""


class DescribeConfigsRequest(TypedDict):
    topics: Annotated[list[DescribeConfigsTopic], Len(0, limits.MAX_TOPICS)]


class ConfigEntry(TypedDict):
    name: Name
    value: Text | None
    """None for a sensitive config."""
    is_default: bool
    read_only: Annotated[bool, Default(False)]
    sensitive: Annotated[bool, Default(False)]


class DescribedConfigs(TypedDict):
    name: TopicName
    error: ErrorCode
    message: ErrorMessage
    configs: Annotated[list[ConfigEntry], Len(0, limits.MAX_CONFIGS), Default([])]


class DescribeConfigsResponse(TypedDict):
    topics: Annotated[list[DescribedConfigs], Len(0, limits.MAX_TOPICS)]


DESCRIBE_CONFIGS = define_api(
    32, "describe_configs", DescribeConfigsRequest, DescribeConfigsResponse
)


class AlterConfigsTopic(TypedDict):
    name: TopicName
    configs: Annotated[dict[Name, Text | None], Len(0, limits.MAX_CONFIGS)]
    """Incremental: the named configs only; None sets one back to its default."""


class AlterConfigsRequest(TypedDict):
    topics: Annotated[list[AlterConfigsTopic], Len(0, limits.MAX_TOPICS)]
    validate_only: Annotated[bool, Default(False)]


class AlterConfigsResponse(TypedDict):
    topics: Annotated[list[TopicResult], Len(0, limits.MAX_TOPICS)]


ALTER_CONFIGS = define_api(33, "alter_configs", AlterConfigsRequest, AlterConfigsResponse)

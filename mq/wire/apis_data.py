"""Data-path APIs: produce, fetch, list_offsets, init_producer_id.

produce and fetch are the broker's hot path: their bodies are a few maps per
partition around one msgpack ``bin`` of record batches (Kafka RecordBatch v2,
see :mod:`mq.records.batch`), so validating one costs per partition, never per
record, and the batches are neither parsed nor copied by the wire layer beyond
msgpack's own copy.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from mq.wire import limits
from mq.wire.registry import define_api
from mq.wire.schema import (
    I16,
    I32,
    I64,
    Bin,
    Default,
    ErrorCode,
    ErrorMessage,
    Len,
    Name,
    NonNegI32,
    PartitionId,
    Range,
    TopicName,
)

LATEST_TIMESTAMP = -1
"""list_offsets: the offset the next record will get (the high watermark)."""
EARLIEST_TIMESTAMP = -2
"""list_offsets: the log start offset."""

Isolation = Annotated[Literal[0, 1], Default(0)]
"""0 read_uncommitted; 1 read_committed (reserved for transactions: reads stop at
the last stable offset, which equals the high watermark until transactions exist)."""
LeaderEpoch = Annotated[I32, Default(-1)]
"""The leader epoch the client believes current, for fencing; -1: do not check."""

# -- produce (0) -------------------------------------------------------------------------------
# With acks=0 the broker sends no response at all (as Kafka): the client
# completes the request when it is written.


class ProducePartition(TypedDict):
    partition: PartitionId
    records: Bin
    """One or more record batches back to back."""


class ProduceTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[ProducePartition], Len(0, limits.MAX_PARTITIONS)]


class ProduceRequest(TypedDict):
    transactional_id: Annotated[Name | None, Default(None)]
    """Reserved for transactions; None."""
    acks: Literal[-1, 0, 1]
    """0: no response; 1: the leader wrote it; -1: every in-sync replica has it."""
    timeout_ms: NonNegI32
    topics: Annotated[list[ProduceTopic], Len(0, limits.MAX_TOPICS)]


class ProducedPartition(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    base_offset: Annotated[I64, Default(-1)]
    log_append_time: Annotated[I64, Default(-1)]
    """-1 unless the topic uses LogAppendTime."""
    log_start_offset: Annotated[I64, Default(-1)]


class ProducedTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[ProducedPartition], Len(0, limits.MAX_PARTITIONS)]


class ProduceResponse(TypedDict):
    topics: Annotated[list[ProducedTopic], Len(0, limits.MAX_TOPICS)]


PRODUCE = define_api(0, "produce", ProduceRequest, ProduceResponse)

# -- fetch (1): long poll until min_bytes or max_wait_ms ---------------------------------------


class FetchPartition(TypedDict):
    partition: PartitionId
    fetch_offset: I64
    partition_max_bytes: NonNegI32
    current_leader_epoch: LeaderEpoch


class FetchTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[FetchPartition], Len(0, limits.MAX_PARTITIONS)]


class FetchRequest(TypedDict):
    max_wait_ms: NonNegI32
    min_bytes: NonNegI32
    max_bytes: NonNegI32
    isolation_level: Isolation
    topics: Annotated[list[FetchTopic], Len(0, limits.MAX_TOPICS)]


class FetchedPartition(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    high_watermark: Annotated[I64, Default(-1)]
    last_stable_offset: Annotated[I64, Default(-1)]
    log_start_offset: Annotated[I64, Default(-1)]
    records: Annotated[Bin, Default(b"")]
    """Whole batches from the one holding fetch_offset; at least one if any."""


class FetchedTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[FetchedPartition], Len(0, limits.MAX_PARTITIONS)]


class FetchResponse(TypedDict):
    topics: Annotated[list[FetchedTopic], Len(0, limits.MAX_TOPICS)]


FETCH = define_api(1, "fetch", FetchRequest, FetchResponse)

# -- list_offsets (2): earliest, latest, or the first offset at or after a time ----------------


class ListOffsetsPartition(TypedDict):
    partition: PartitionId
    timestamp: Annotated[int, Range(EARLIEST_TIMESTAMP, limits.I64_MAX)]
    """LATEST_TIMESTAMP (-1), EARLIEST_TIMESTAMP (-2), or a time in ms."""
    current_leader_epoch: LeaderEpoch


class ListOffsetsTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[ListOffsetsPartition], Len(0, limits.MAX_PARTITIONS)]


class ListOffsetsRequest(TypedDict):
    isolation_level: Isolation
    topics: Annotated[list[ListOffsetsTopic], Len(0, limits.MAX_TOPICS)]


class ListedOffset(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    timestamp: Annotated[I64, Default(-1)]
    offset: Annotated[I64, Default(-1)]
    """-1 when no record has a timestamp at or after the one asked for."""
    leader_epoch: Annotated[I32, Default(-1)]


class ListedOffsetsTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[ListedOffset], Len(0, limits.MAX_PARTITIONS)]


class ListOffsetsResponse(TypedDict):
    topics: Annotated[list[ListedOffsetsTopic], Len(0, limits.MAX_TOPICS)]


LIST_OFFSETS = define_api(2, "list_offsets", ListOffsetsRequest, ListOffsetsResponse)

# -- init_producer_id (22): the idempotent producer's id and epoch -----------------------------


class InitProducerIdRequest(TypedDict):
    transactional_id: Annotated[Name | None, Default(None)]
    """Reserved for transactions; None."""
    producer_id: Annotated[I64, Default(-1)]
    """-1 for a new id; or the current id, to bump its epoch after a fatal error."""
    producer_epoch: Annotated[I16, Default(-1)]


class InitProducerIdResponse(TypedDict):
    producer_id: I64
    producer_epoch: I16


INIT_PRODUCER_ID = define_api(22, "init_producer_id", InitProducerIdRequest, InitProducerIdResponse)

# -- describe_producers (61, Kafka's key): idempotent producers' state per partition ----------
# (issue 23: the exactly-once Spark sink reads where an earlier attempt of its task stopped)

MAX_DESCRIBED_PRODUCERS = 1_000
"""Producer ids one request may filter on: a Spark sink asks for one; a bound on the work."""


class DescribeProducersTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[PartitionId], Len(0, limits.MAX_PARTITIONS)]


class DescribeProducersRequest(TypedDict):
    topics: Annotated[list[DescribeProducersTopic], Len(0, limits.MAX_TOPICS)]
    producer_ids: Annotated[list[I64] | None, Default(None), Len(0, MAX_DESCRIBED_PRODUCERS)]
    """mq's extension: only these producers (None: every producer the partition knows)."""


class ProducerState(TypedDict):
    producer_id: I64
    producer_epoch: I16
    last_sequence: I32
    """The sequence of the last record the partition appended for it (-1: none)."""
    last_timestamp: I64
    epoch_start_offset: Annotated[I64, Default(-1)]
    """mq's extension (issue 23), after Kafka's fields: the offset of the first batch of
    the producer's current epoch (-1: unknown, or a broker that predates the field), where
    the exactly-once Spark sink starts reading back what an earlier attempt wrote."""


class DescribedProducersPartition(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    producers: Annotated[list[ProducerState], Len(0, limits.MAX_DECODED_ITEMS)]


class DescribedProducersTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[DescribedProducersPartition], Len(0, limits.MAX_PARTITIONS)]


class DescribeProducersResponse(TypedDict):
    topics: Annotated[list[DescribedProducersTopic], Len(0, limits.MAX_TOPICS)]


DESCRIBE_PRODUCERS = define_api(
    61, "describe_producers", DescribeProducersRequest, DescribeProducersResponse
)

"""Broker-to-broker APIs: replica_fetch, how followers pull from their leaders, and
internal_append, how a broker writes to an internal topic another broker leads.

A follower sends one replica_fetch per leader broker for every partition it
follows there (long poll, as fetch). Unlike a consumer's fetch it reads up to
the leader's log end, not the high watermark, and its ``fetch_offset`` tells
the leader the follower's log end offset, which moves the high watermark and
the ISR. ``last_fetched_epoch`` (the leader epoch of the follower's last
batch) lets the leader spot a diverging log: the answer then carries the end
offset of that epoch on the leader instead of records, and the follower
truncates there before fetching again (KIP-320/KIP-595), so replicas never
keep a former leader's unreplicated writes.
"""

from __future__ import annotations

from typing import Annotated, TypedDict

from mq.wire import limits
from mq.wire.apis_data import LeaderEpoch
from mq.wire.registry import define_api
from mq.wire.schema import (
    I32,
    I64,
    Bin,
    Default,
    ErrorCode,
    ErrorMessage,
    Len,
    NonNegI32,
    PartitionId,
    TopicName,
)

NO_EPOCH = -1


class ReplicaFetchPartition(TypedDict):
    partition: PartitionId
    fetch_offset: I64
    """The follower's log end offset: where it wants to go on."""
    last_fetched_epoch: Annotated[I32, Default(NO_EPOCH)]
    """Leader epoch of the follower's last batch (-1: its log is empty)."""
    current_leader_epoch: LeaderEpoch
    """The epoch the follower believes its leader has (fencing)."""


class ReplicaFetchTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[ReplicaFetchPartition], Len(0, limits.MAX_PARTITIONS)]


class ReplicaFetchRequest(TypedDict):
    replica_id: NonNegI32
    """The follower's node id."""
    max_wait_ms: NonNegI32
    min_bytes: NonNegI32
    max_bytes: NonNegI32
    topics: Annotated[list[ReplicaFetchTopic], Len(0, limits.MAX_TOPICS)]


class ReplicaFetchedPartition(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    high_watermark: Annotated[I64, Default(-1)]
    log_start_offset: Annotated[I64, Default(-1)]
    diverging_epoch: Annotated[I32, Default(NO_EPOCH)]
    """Set when the follower's log diverges: the largest epoch the leader has that is not
    after ``last_fetched_epoch``..."""
    diverging_end_offset: Annotated[I64, Default(-1)]
    """...and where that epoch ends on the leader: the follower truncates there."""
    records: Annotated[Bin, Default(b"")]


class ReplicaFetchedTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[ReplicaFetchedPartition], Len(0, limits.MAX_PARTITIONS)]


class ReplicaFetchResponse(TypedDict):
    topics: Annotated[list[ReplicaFetchedTopic], Len(0, limits.MAX_TOPICS)]


REPLICA_FETCH = define_api(1000, "replica_fetch", ReplicaFetchRequest, ReplicaFetchResponse)

# -- internal_append (1001): a broker writes to an internal topic led by another -----------------
# Clients may not produce to internal topics; a broker that keeps state in one
# (share groups in ``__share_state``) appends through this API, with acks=all.


class InternalAppendRequest(TypedDict):
    topic: TopicName
    partition: PartitionId
    records: Bin
    """One or more record batches back to back."""
    timeout_ms: NonNegI32


class InternalAppendResponse(TypedDict):
    error: ErrorCode
    message: ErrorMessage
    base_offset: Annotated[I64, Default(-1)]


INTERNAL_APPEND = define_api(1001, "internal_append", InternalAppendRequest, InternalAppendResponse)

# -- broker_hello (1002): a connection proves it comes from a broker of this cluster -------------
# The broker-to-broker APIs above are served only on connections that sent this
# first with the cluster's inter-broker secret (until TLS and SASL: issue 19).

MIN_SECRET_BYTES = 16
"""Shortest inter-broker secret: 128 bits, out of reach of guessing over the network."""
MAX_SECRET_BYTES = 1_024
"""Longest inter-broker secret on the wire (a generated one is 32 bytes; a configured
one is a passphrase, not a document)."""


class BrokerHelloRequest(TypedDict):
    node_id: NonNegI32
    """The sender's node id (for the logs; the secret is the proof)."""
    secret: Annotated[bytes, Len(0, MAX_SECRET_BYTES)]
    """The cluster's inter-broker secret (kept in the metadata store or the config)."""


class BrokerHelloResponse(TypedDict):
    node_id: NonNegI32
    """The answering broker's node id."""


BROKER_HELLO = define_api(1002, "broker_hello", BrokerHelloRequest, BrokerHelloResponse)

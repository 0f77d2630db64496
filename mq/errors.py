"""One error taxonomy for the broker, the client and the storage engine.

Every error has a stable numeric ``code`` (Kafka's numbers where the meaning is
the same, so a Kafka-protocol listener can reuse them), a ``name``, and a
``retriable`` flag telling a client whether the same request may succeed later.
``error_for_code`` turns a code received on the wire back into its class.

Some errors are *local*: raised on one side and never sent, such as
:class:`ProtocolError` or the client's :class:`ClientStateError`. They
define no code of their own and subclass the class whose meaning they refine,
whose ``code`` and ``name`` they inherit (and ``retriable``, unless they say
otherwise).
"""

from __future__ import annotations

from typing import ClassVar

_BY_CODE: dict[int, type[MQError]] = {}


class MQError(Exception):
    """Base of every mq error."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    default_message: ClassVar[str] = "an unexpected error happened on the server"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            if cls.code in _BY_CODE:
                raise TypeError(f"error code {cls.code} is taken by {_BY_CODE[cls.code].__name__}")
            _BY_CODE[cls.code] = cls

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.default_message)

    @property
    def message(self) -> str:
        return str(self.args[0])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


_BY_CODE[MQError.code] = MQError


def error_for_code(code: int) -> type[MQError]:
    """The error class for a code received from a peer (unknown codes map to MQError)."""
    return _BY_CODE.get(code, MQError)


def all_errors() -> dict[int, type[MQError]]:
    """Every registered error class by code (for documentation and tests)."""
    return dict(_BY_CODE)


class OffsetOutOfRangeError(MQError):
    code = 1
    name = "OFFSET_OUT_OF_RANGE"
    default_message = "the requested offset is outside the log's range"


class CorruptRecordError(MQError):
    code = 2
    name = "CORRUPT_MESSAGE"
    retriable = True
    default_message = "a record batch failed its CRC or structural check"


class CorruptDataError(CorruptRecordError):
    """A stored batch is damaged and no in-sync replica holds a healthy copy of it.

    Not retriable, unlike its parent: reading the same offsets again cannot
    succeed until an operator runs ``mq storage repair --cut`` or ``--skip``
    (the message names the offsets). mq's own code, outside Kafka's range.
    """

    code = 130
    name = "CORRUPT_DATA"
    retriable = False
    default_message = "a stored batch is damaged and no in-sync replica has a healthy copy"


class UnknownTopicOrPartitionError(MQError):
    code = 3
    name = "UNKNOWN_TOPIC_OR_PARTITION"
    retriable = True
    default_message = "this server does not host this topic-partition"


class RecordTooLargeError(MQError):
    code = 10
    name = "MESSAGE_TOO_LARGE"
    default_message = "the record batch is larger than the maximum the topic accepts"


class InvalidRequestError(MQError):
    code = 42
    name = "INVALID_REQUEST"
    default_message = "the request is malformed"


class StorageError(MQError):
    """A write, sync or read of a log failed; the partition is offline until restart."""

    code = 56
    name = "STORAGE_ERROR"
    retriable = True
    default_message = "the partition's storage failed and the partition is offline"


class UnsupportedCompressionError(MQError):
    code = 76
    name = "UNSUPPORTED_COMPRESSION_TYPE"
    default_message = "the compression codec is not supported"


class InvalidRecordError(MQError):
    code = 87
    name = "INVALID_RECORD"
    default_message = "the record batch breaks a rule of the format or the topic"


class InvalidTimestampError(MQError):
    code = 32
    name = "INVALID_TIMESTAMP"
    default_message = "a timestamp in the batch is out of the accepted range"


class InvalidConfigError(MQError):
    code = 40
    name = "INVALID_CONFIG"
    default_message = "a configuration value is invalid"


# -- protocol ------------------------------------------------------------------
# Codes and names below are Kafka's (``org.apache.kafka.common.protocol.Errors``)
# wherever mq returns the same condition.


class UnsupportedVersionError(MQError):
    """The broker does not know this API key, or not at this version (see api_versions)."""

    code = 35
    name = "UNSUPPORTED_VERSION"
    default_message = "the api or api version is not supported by this broker"


class ProtocolError(InvalidRequestError):
    """Local: the peer broke the framing or envelope rules; close the connection.

    Raised by the :mod:`mq.wire` decoders when a frame or an envelope cannot be
    trusted (no correlation id to answer, or a response that does not parse).
    It has no code of its own: on the wire it is INVALID_REQUEST (42).
    """


class FrameTooLargeError(ProtocolError):
    """Local: a frame's length prefix is zero or above the receiver's bound."""

    default_message = "the frame's length prefix is outside the accepted range"


class NetworkError(MQError):
    """Local (client): the connection broke before the response arrived."""

    code = 13
    name = "NETWORK_EXCEPTION"
    retriable = True
    default_message = "the connection to the broker was lost"


class RequestTimedOutError(MQError):
    code = 7
    name = "REQUEST_TIMED_OUT"
    retriable = True
    default_message = "the request timed out"


# -- local to the client -----------------------------------------------------------


class ClientStateError(MQError):
    """Local: the producer, consumer or admin is not started, or already stopped.

    Also a call that the client's mode forbids (e.g. ``assign`` after
    ``subscribe``, a commit without a ``group_id``). Not retriable: the same
    call fails the same way until the application changes what it does.
    """

    default_message = "the client is not running"


class BrokerUnavailableError(NetworkError):
    """Local, retriable: the broker's circuit breaker is open after repeated failures.

    Requests to that broker fail at once, without a connection attempt, until
    the breaker's cooldown has passed.
    """

    default_message = "the broker is unavailable (circuit breaker open)"


# -- topics and partitions -------------------------------------------------------


class LeaderNotAvailableError(MQError):
    code = 5
    name = "LEADER_NOT_AVAILABLE"
    retriable = True
    default_message = "the partition has no leader right now (election in progress)"


class NotLeaderOrFollowerError(MQError):
    code = 6
    name = "NOT_LEADER_OR_FOLLOWER"
    retriable = True
    default_message = "this broker is not the leader of the partition; refresh metadata"


class InvalidTopicError(MQError):
    code = 17
    name = "INVALID_TOPIC_EXCEPTION"
    default_message = "the topic name is invalid"


class NotEnoughReplicasError(MQError):
    code = 19
    name = "NOT_ENOUGH_REPLICAS"
    retriable = True
    default_message = "fewer in-sync replicas than min.insync.replicas"


class NotEnoughReplicasAfterAppendError(MQError):
    code = 20
    name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    retriable = True
    default_message = "the batch was written but the in-sync replicas fell below the minimum"


class TopicAlreadyExistsError(MQError):
    code = 36
    name = "TOPIC_ALREADY_EXISTS"
    default_message = "the topic already exists"


class InvalidPartitionsError(MQError):
    code = 37
    name = "INVALID_PARTITIONS"
    default_message = "the number of partitions is invalid"


class InvalidReplicationFactorError(MQError):
    code = 38
    name = "INVALID_REPLICATION_FACTOR"
    default_message = "the replication factor is invalid or larger than the broker count"


class InvalidReplicaAssignmentError(MQError):
    code = 39
    name = "INVALID_REPLICA_ASSIGNMENT"
    default_message = "the replica assignment is invalid (empty, a broker twice, a dead broker)"


class PolicyViolationError(MQError):
    """Kafka's POLICY_VIOLATION: the request is valid but a broker's limit refuses it.

    Raised when a topic's partitions would take a broker past the partitions its
    file budget allows (``max_partitions``, :mod:`mq.broker.limits`). Not
    retriable: the same request fails until partitions are deleted or the
    limit is raised.
    """

    code = 44
    name = "POLICY_VIOLATION"
    default_message = "the request is refused by a broker's limits"


class NotControllerError(MQError):
    code = 41
    name = "NOT_CONTROLLER"
    retriable = True
    default_message = "this broker is not the controller"


class FencedLeaderEpochError(MQError):
    code = 74
    name = "FENCED_LEADER_EPOCH"
    retriable = True
    default_message = "the request's leader epoch is older than the partition's"


class UnknownLeaderEpochError(MQError):
    code = 75
    name = "UNKNOWN_LEADER_EPOCH"
    retriable = True
    default_message = "the request's leader epoch is newer than this broker knows"


class OffsetNotAvailableError(MQError):
    code = 78
    name = "OFFSET_NOT_AVAILABLE"
    retriable = True
    default_message = (
        "the leader's high watermark has not caught up with its epoch start yet (a new leader)"
    )


class PreferredLeaderNotAvailableError(MQError):
    code = 80
    name = "PREFERRED_LEADER_NOT_AVAILABLE"
    retriable = True
    default_message = "the preferred leader is not alive or not in sync"


class ElectionNotNeededError(MQError):
    code = 84
    name = "ELECTION_NOT_NEEDED"
    default_message = "the partition is already led by its preferred leader"


class NoReassignmentInProgressError(MQError):
    code = 85
    name = "NO_REASSIGNMENT_IN_PROGRESS"
    default_message = "the partition has no reassignment in progress to cancel"


# -- idempotent producer -----------------------------------------------------------


class OutOfOrderSequenceError(MQError):
    code = 45
    name = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    default_message = "the batch's sequence number does not follow the last one written"


class DuplicateSequenceError(MQError):
    code = 46
    name = "DUPLICATE_SEQUENCE_NUMBER"
    default_message = "the batch's sequence number was already written"


class InvalidProducerEpochError(MQError):
    code = 47
    name = "INVALID_PRODUCER_EPOCH"
    default_message = "the producer epoch is older than the current one (fenced)"


class UnknownProducerIdError(MQError):
    code = 59
    name = "UNKNOWN_PRODUCER_ID"
    retriable = True
    default_message = "the broker has no state for this producer id"


# -- consumer groups -----------------------------------------------------------------


class OffsetMetadataTooLargeError(MQError):
    code = 12
    name = "OFFSET_METADATA_TOO_LARGE"
    default_message = "the committed offset's metadata string is too large"


class CoordinatorLoadInProgressError(MQError):
    code = 14
    name = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True
    default_message = "the group coordinator is still loading its offsets"


class CoordinatorNotAvailableError(MQError):
    code = 15
    name = "COORDINATOR_NOT_AVAILABLE"
    retriable = True
    default_message = "the group coordinator is not available"


class NotCoordinatorError(MQError):
    code = 16
    name = "NOT_COORDINATOR"
    retriable = True
    default_message = "this broker is not the group's coordinator; find it again"


class IllegalGenerationError(MQError):
    code = 22
    name = "ILLEGAL_GENERATION"
    default_message = "the member's generation is not the group's current one"


class InconsistentGroupProtocolError(MQError):
    code = 23
    name = "INCONSISTENT_GROUP_PROTOCOL"
    default_message = "the member's assignor differs from the group's"


class InvalidGroupIdError(MQError):
    code = 24
    name = "INVALID_GROUP_ID"
    default_message = "the group id is empty or invalid"


class UnknownMemberIdError(MQError):
    code = 25
    name = "UNKNOWN_MEMBER_ID"
    default_message = "the coordinator does not know this member id"


class InvalidSessionTimeoutError(MQError):
    code = 26
    name = "INVALID_SESSION_TIMEOUT"
    default_message = "the session timeout is outside the broker's accepted range"


class RebalanceInProgressError(MQError):
    code = 27
    name = "REBALANCE_IN_PROGRESS"
    retriable = True
    default_message = "the group is rebalancing"


class NonEmptyGroupError(MQError):
    code = 68
    name = "NON_EMPTY_GROUP"
    default_message = "the group has active members"


class GroupIdNotFoundError(MQError):
    code = 69
    name = "GROUP_ID_NOT_FOUND"
    default_message = "the group does not exist"


class GroupMaxSizeReachedError(MQError):
    code = 81
    name = "GROUP_MAX_SIZE_REACHED"
    default_message = "the group has reached its maximum number of members"


class FencedInstanceIdError(MQError):
    code = 82
    name = "FENCED_INSTANCE_ID"
    default_message = "another member with the same group instance id replaced this one"


# -- queues (share groups) ------------------------------------------------------------


class InvalidReceiptError(MQError):
    """The receipt does not name a message leased now: its lease expired (and it may
    have been delivered again), or it was already acked or dead-lettered."""

    code = 121
    name = "INVALID_RECORD_STATE"
    default_message = "the message is not leased under this receipt"


class ShareSessionLimitReachedError(MQError):
    """The broker holds as many share partitions (share group x partition) as it may,
    and none is idle enough to evict: retry later (Kafka's code and name)."""

    code = 133
    name = "SHARE_SESSION_LIMIT_REACHED"
    retriable = True
    default_message = "the broker's share sessions are all in use"


# -- security (the handlers come later; the codes are part of the protocol now) ---------


class TopicAuthorizationFailedError(MQError):
    code = 29
    name = "TOPIC_AUTHORIZATION_FAILED"
    default_message = "the principal is not authorized for this topic"


class GroupAuthorizationFailedError(MQError):
    code = 30
    name = "GROUP_AUTHORIZATION_FAILED"
    default_message = "the principal is not authorized for this group"


class ClusterAuthorizationFailedError(MQError):
    code = 31
    name = "CLUSTER_AUTHORIZATION_FAILED"
    default_message = "the principal is not authorized for this cluster operation"


class UnsupportedSaslMechanismError(MQError):
    code = 33
    name = "UNSUPPORTED_SASL_MECHANISM"
    default_message = "the broker does not enable this SASL mechanism"


class IllegalSaslStateError(MQError):
    code = 34
    name = "ILLEGAL_SASL_STATE"
    default_message = "the request is not valid in the connection's authentication state"


class SaslAuthenticationFailedError(MQError):
    code = 58
    name = "SASL_AUTHENTICATION_FAILED"
    default_message = "authentication failed"


# -- authorization (issue 19, ACLs) ----------------------------------------------------


class SecurityDisabledError(MQError):
    code = 54
    name = "SECURITY_DISABLED"
    default_message = 'authorization is off on this broker (authorizer = "none")'


# -- encryption at rest (mq's own codes, 160-169) ----------------------------------------


class EncryptionKeyNotFoundError(MQError):
    """A stored batch is encrypted with a key id this broker's keyring does not hold (or
    the broker has no key file): reads of it fail until the key is added; the message
    names the key id. Other partitions are served as usual."""

    code = 160
    name = "ENCRYPTION_KEY_NOT_FOUND"
    default_message = "the batch is encrypted with a key this broker does not hold"


class DecryptionFailedError(MQError):
    """A stored encrypted batch does not authenticate (AES-GCM tag): its bytes were
    altered with a matching CRC, or its key id names another key than the one that
    encrypted it."""

    code = 161
    name = "DECRYPTION_FAILED"
    default_message = "an encrypted batch failed authentication"


# -- identity (issue 19) -------------------------------------------------------------


class ResourceNotFoundError(MQError):
    code = 91
    name = "RESOURCE_NOT_FOUND"
    default_message = "the resource does not exist"


class TlsMismatchError(NetworkError):
    """A TLS client met a plaintext listener, a plaintext client a TLS one, or the TLS
    handshake failed (a refused certificate): retrying will not help (local)."""

    retriable = False

"""One error taxonomy for the broker, the client and the storage engine.

Every error has a stable numeric ``code`` (Kafka's numbers where the meaning is
the same, so a Kafka-protocol listener can reuse them), a ``name``, and a
``retriable`` flag telling a client whether the same request may succeed later.
``error_for_code`` turns a code received on the wire back into its class.
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

"""Identity APIs: SCRAM users (Kafka's DescribeUserScramCredentials 50 and
AlterUserScramCredentials 51, as msgpack maps).

Unlike Kafka, an upsertion carries the credential the broker stores (salt,
StoredKey, ServerKey, iterations: :mod:`mq.replication.scram_store`), computed by
the client from the password, not the salted password: the password never travels
and nothing that travels lets its reader log in. Results are per user, each with
an error code (0: none) and a message.
"""

from __future__ import annotations

from typing import Annotated, TypedDict

from mq.wire.registry import define_api
from mq.wire.schema import Default, ErrorCode, ErrorMessage, Len, Name, NonNegI32

MAX_USERS = 1_000
"""Users one request may name (and a describe of every user may return)."""
Key = Annotated[bytes, Len(0, 128)]
"""A salt or a SCRAM key: 16-64 bytes in practice (SHA-512's keys are 64)."""
Users = Annotated[list[Name], Len(0, MAX_USERS)]


class DescribeUserScramCredentialsRequest(TypedDict):
    users: Annotated[Users | None, Default(None)]
    """None: every user."""


class ScramCredentialInfo(TypedDict):
    mechanism: Name
    iterations: NonNegI32


class DescribedUser(TypedDict):
    user: Name
    error: ErrorCode
    message: ErrorMessage
    credentials: Annotated[list[ScramCredentialInfo], Len(0, 8)]


class DescribeUserScramCredentialsResponse(TypedDict):
    results: Annotated[list[DescribedUser], Len(0, MAX_USERS)]


DESCRIBE_USER_SCRAM_CREDENTIALS = define_api(
    50,
    "describe_user_scram_credentials",
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)


class ScramUpsertion(TypedDict):
    user: Name
    mechanism: Name
    iterations: NonNegI32
    salt: Key
    stored_key: Key
    server_key: Key


class ScramDeletion(TypedDict):
    user: Name
    mechanism: Annotated[Name | None, Default(None)]
    """None: every mechanism of the user."""


class AlterUserScramCredentialsRequest(TypedDict):
    upsertions: Annotated[list[ScramUpsertion], Len(0, MAX_USERS), Default([])]
    deletions: Annotated[list[ScramDeletion], Len(0, MAX_USERS), Default([])]


class AlteredUser(TypedDict):
    user: Name
    error: ErrorCode
    message: ErrorMessage


class AlterUserScramCredentialsResponse(TypedDict):
    results: Annotated[list[AlteredUser], Len(0, 2 * MAX_USERS)]


ALTER_USER_SCRAM_CREDENTIALS = define_api(
    51,
    "alter_user_scram_credentials",
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)

"""How a broker proves to another that it belongs to the cluster (until TLS and SASL).

The broker-to-broker APIs (``replica_fetch``, ``internal_append``) and the
internal topics are the brokers' alone (:mod:`mq.broker.gate`). A connection a
broker opens to another (a replica fetcher's, a forwarded request's) sends
``broker_hello`` right after ``api_versions`` with the cluster's
**inter-broker secret**; the receiving broker compares it in constant time
(``hmac.compare_digest``) and marks the connection as a broker's.

Where the secret comes from: the broker setting ``inter_broker_secret`` if
given (every broker of the cluster must then have the same), otherwise the
metadata store, where the cluster's first broker creates a random one
(create-if-absent, as the cluster id) and every other reads it. Whoever can
read the metadata store (etcd, or the embedded store's file in the data
directory) can read the secret: they could rewrite the cluster anyway.

The secret travels in clear on a plaintext connection, as a password would
before TLS: this keeps careless and hostile *clients* away from the
replication protocol, not someone who can sniff the brokers' network.
It is never logged.

Thread safety: one event loop.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field

from mq.client.connection import Connection
from mq.client.security import Security
from mq.errors import MQError
from mq.replication.store import MetadataStore
from mq.wire.apis_replication import BROKER_HELLO, MIN_SECRET_BYTES

SECRET_KEY = "/inter_broker_secret"
"""Where the metadata store keeps the generated secret."""
GENERATED_SECRET_BYTES = 32
"""A generated secret's length: 256 random bits."""
HELLO_TIMEOUT_S = 10.0
"""How long a broker waits for the answer to its hello (as a forwarded request)."""


@dataclass(frozen=True)
class BrokerCredentials:
    """What a broker shows another: its node id and the cluster's secret (not in repr)."""

    node_id: int
    secret: bytes = field(repr=False)
    security: Security | None = field(default=None, repr=False)
    """TLS and SASL of the connections this broker opens to others (issue 19): those of
    the inter-broker listener, with the broker's own credentials; None: plaintext."""

    def matches(self, presented: bytes) -> bool:
        """Whether ``presented`` is the secret (constant time: no timing oracle)."""
        return hmac.compare_digest(self.secret, presented)


async def cluster_secret(store: MetadataStore, configured: str | None) -> bytes:
    """The inter-broker secret: the configured one, else the store's (made if absent)."""
    if configured is not None:
        return configured.encode()
    secret = await store.get_or_create(
        SECRET_KEY, lambda: secrets.token_bytes(GENERATED_SECRET_BYTES)
    )
    if len(secret) < MIN_SECRET_BYTES:
        raise MQError(f"the metadata store's {SECRET_KEY} is shorter than allowed")
    return secret


async def open_broker_connection(
    host: str, port: int, credentials: BrokerCredentials, *, client_id: str
) -> Connection:
    """A connection to another broker, identified as this cluster's broker.

    Raises NetworkError if it cannot connect, ClusterAuthorizationFailedError if
    the other broker refuses the secret (another cluster's, or a misconfigured one).
    """
    connection = await Connection.open(
        host, port, client_id=client_id, security=credentials.security
    )
    try:
        await connection.call(
            BROKER_HELLO,
            {"node_id": credentials.node_id, "secret": credentials.secret},
            timeout_s=HELLO_TIMEOUT_S,
        )
    except BaseException:
        connection.close()
        raise
    return connection

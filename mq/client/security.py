"""How a client secures its connections: TLS and SASL, with aiokafka's option names.

Every client (``Producer``, ``Consumer``, ``Admin``, ``QueueClient`` and their
sync wrappers) takes the same keywords::

    security_protocol="SASL_SSL",        # PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    sasl_mechanism="SCRAM-SHA-256",      # or SCRAM-SHA-512, PLAIN (only with SASL_SSL)
    sasl_plain_username="alice",
    sasl_plain_password="...",           # never logged, not in any repr
    ssl_context=ctx,                     # an ssl.SSLContext; or:
    ssl_cafile="ca.pem",                 # the CA to verify the broker with (a context is made)
    ssl_certfile="me.pem", ssl_keyfile="me.key",  # a client certificate (mutual TLS)

Each new connection does TLS (when asked), ``api_versions``, then the SASL exchange
(:func:`authenticate`), before any other request. A TLS client that meets a
plaintext listener, or the reverse, fails at once with
:class:`~mq.errors.TlsMismatchError` saying so.

Thread safety: immutable values; :func:`authenticate` runs on one event loop.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from scramp import ScramClient

from mq.errors import SaslAuthenticationFailedError
from mq.wire.apis_core import AUTHENTICATE

if TYPE_CHECKING:
    from mq.client.connection import Connection

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
AUTH_TIMEOUT_S = 30.0
"""One SASL step's bound (the broker delays a failed login by up to 10 s)."""


class SecurityOptions(TypedDict, total=False):
    """The security keywords every client takes (see the module docstring)."""

    security_protocol: str
    sasl_mechanism: str
    sasl_plain_username: str | None
    sasl_plain_password: str | None
    ssl_context: ssl.SSLContext | None
    ssl_cafile: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None


@dataclass(frozen=True)
class Security:
    """One client's security settings, checked (see :func:`security_from`)."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "SCRAM-SHA-256"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def tls_context(
    cafile: str | None = None, certfile: str | None = None, keyfile: str | None = None
) -> ssl.SSLContext:
    """A client TLS context: verifies the broker (``cafile``, else the system's CAs) and
    its host name, TLS 1.2+, and shows a client certificate if given."""
    context = ssl.create_default_context(cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile is not None:
        context.load_cert_chain(certfile, keyfile)
    return context


def security_from(options: SecurityOptions) -> Security | None:
    """The checked settings (ValueError naming a bad one); None for plain PLAINTEXT."""
    protocol = (options.get("security_protocol") or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"security_protocol must be one of {', '.join(PROTOCOLS)}")
    mechanism = (options.get("sasl_mechanism") or "SCRAM-SHA-256").upper()
    if mechanism not in MECHANISMS:
        raise ValueError(f"sasl_mechanism must be one of {', '.join(MECHANISMS)}")
    username = options.get("sasl_plain_username")
    password = options.get("sasl_plain_password")
    context = options.get("ssl_context")
    if protocol.startswith("SASL_") and (username is None or password is None):
        raise ValueError(f"{protocol} needs sasl_plain_username and sasl_plain_password")
    if mechanism == "PLAIN" and protocol == "SASL_PLAINTEXT":
        raise ValueError("PLAIN sends the password in clear: use it only with SASL_SSL")
    if protocol in ("SSL", "SASL_SSL") and context is None:
        context = tls_context(
            options.get("ssl_cafile"), options.get("ssl_certfile"), options.get("ssl_keyfile")
        )
    if protocol == "PLAINTEXT":
        return None
    return Security(protocol, mechanism, username, password, context)


async def authenticate(connection: Connection, security: Security) -> None:
    """The client side of the SASL exchange on a connection fresh from api_versions."""
    assert security.username is not None
    assert security.password is not None
    mechanism = security.mechanism
    if mechanism == "PLAIN":
        message = b"\0" + security.username.encode() + b"\0" + security.password.encode()
        await _step(connection, mechanism, message)
        return
    client = ScramClient([mechanism], security.username, security.password)
    server_first = await _step(connection, mechanism, client.get_client_first().encode())
    try:
        client.set_server_first(server_first.decode())
        final = client.get_client_final()
    except Exception as exc:  # scramp's errors, a non-UTF-8 message
        raise SaslAuthenticationFailedError(
            f"the broker's SCRAM message is invalid: {exc}"
        ) from exc
    server_final = await _step(connection, mechanism, final.encode())
    try:
        client.set_server_final(server_final.decode())
    except Exception as exc:
        raise SaslAuthenticationFailedError(
            f"the broker could not prove it holds this user's credential: {exc}"
        ) from exc


async def _step(connection: Connection, mechanism: str, message: bytes) -> bytes:
    response = await connection.call(
        AUTHENTICATE,
        {"mechanism": mechanism, "auth_bytes": message},
        timeout_s=AUTH_TIMEOUT_S,
    )
    reply: bytes = response["auth_bytes"]
    return reply

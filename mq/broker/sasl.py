"""SASL on the broker: the ``authenticate`` exchange and who may ask what before it.

On a SASL listener (``sasl_plaintext``, ``sasl_ssl``) a connection is
``User:ANONYMOUS`` and may send only ``api_versions`` and ``authenticate``
(:func:`admit`); anything else is answered with ILLEGAL_SASL_STATE and the
connection is closed. ``authenticate`` (api 36) carries one SASL message per
request and is repeated until the response says ``complete``:

* **SCRAM-SHA-256 / SCRAM-SHA-512** (RFC 5802, RFC 7677), through ``scramp``:
  client-first → server-first, client-final → server-final. The broker holds only
  the stored keys (:mod:`mq.replication.scram_store`). No channel binding and no
  authorization identity (``n,,`` or ``y,,`` only): the principal is the user
  who proved the password.
* **PLAIN** (RFC 4616), only on a TLS listener: the password travels in it.
  Checked against the user's SCRAM credential (PBKDF2 in a worker thread, so the
  event loop keeps serving).

A failed login (wrong password, unknown user, a malformed or out-of-order
message) is answered, after ``sasl_failed_authentication_delay_ms``, with one and
the same SASL_AUTHENTICATION_FAILED, and the connection is closed. An unknown
user gets a server-first message like a real one (a salt derived from the
cluster's secret and the name, so it is stable across attempts and brokers), so
that the exchange does not tell whether the user exists (Kafka and PostgreSQL do
the same). Failures are counted (:data:`stats`) and logged at most once per
:data:`LOG_INTERVAL_S`.

Bounds: one SASL message is at most :data:`MAX_SASL_MESSAGE_BYTES`, an exchange
at most :data:`MAX_STEPS` messages, one step at a time per connection, and the
connection is closed if it has not authenticated ``sasl_authenticate_timeout_ms``
after it opened (:meth:`mq.broker.connection.Connection.sweep`).

Thread safety: one event loop (PLAIN's key derivation runs in a worker thread on
its own inputs).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from scramp import ScramMechanism

from mq.broker.context import RequestContext
from mq.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from mq.replication.scram_store import (
    DEFAULT_ITERATIONS,
    SCRAM_MECHANISMS,
    CredentialCache,
    ScramCredential,
    make_credential,
)
from mq.wire.apis_core import API_VERSIONS, AUTHENTICATE, AuthenticateRequest, AuthenticateResponse
from mq.wire.messages import Request

if TYPE_CHECKING:
    from mq.broker.broker import Broker

log = logging.getLogger(__name__)

MECHANISMS = (*SCRAM_MECHANISMS, "PLAIN")
MAX_SASL_MESSAGE_BYTES = 4096
"""One SASL message: a SCRAM message is ~100-300 bytes (a 256-byte user name, nonces,
a proof), a PLAIN one a name and a password; anything longer is not a login."""
MAX_STEPS = 2
"""SCRAM takes two client messages, PLAIN one: a third is refused."""
LOG_INTERVAL_S = 10.0
"""At most one warning about failed logins per this many seconds (with the count)."""
PRE_AUTH_APIS = frozenset({API_VERSIONS.key, AUTHENTICATE.key})
"""What a connection of a SASL listener may ask before it has authenticated."""


@dataclass
class AuthStats:
    """Logins since the start (all brokers of this process)."""

    succeeded: int = 0
    failed: int = 0
    _last_log: float = -LOG_INTERVAL_S
    _unlogged: int = 0


stats = AuthStats()


class _Failed(Exception):
    """A login that did not succeed (why is logged at debug level, never sent)."""


def admit(ctx: RequestContext, request: Request[Any]) -> None:
    """Refuse (and have the connection closed) what an unauthenticated SASL connection
    may not ask."""
    if ctx.authenticated or request.api.key in PRE_AUTH_APIS:
        return
    ctx.disconnect = "a request before authentication"
    raise IllegalSaslStateError(
        f"{request.api.name} before authentication: this listener ({ctx.listener}) requires "
        "SASL authentication first (api_versions, then authenticate); closing the connection"
    )


def _fake_credential(secret: bytes, mechanism: str, name: str) -> ScramCredential:
    """What an unknown user appears to have: a stable salt, keys that match nothing."""
    salt = hmac.new(secret, f"{mechanism}\0{name}".encode(), hashlib.sha256).digest()[:16]
    return ScramCredential(
        salt, secrets.token_bytes(32), secrets.token_bytes(32), DEFAULT_ITERATIONS
    )


class ScramExchange:
    """The server side of one SCRAM exchange (two steps)."""

    def __init__(
        self,
        mechanism: str,
        credentials: CredentialCache,
        secret: bytes,
        *,
        server_nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._secret = secret
        self._nonce = server_nonce
        self._server: Any = None
        self.user: str | None = None
        self._known = False

    def _auth_info(self, name: str) -> tuple[bytes, bytes, bytes, int]:
        self.user = name
        found = self._credentials.get(name, self.mechanism)
        self._known = found is not None
        credential = found or _fake_credential(self._secret, self.mechanism, name)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def step(self, message: bytes, index: int) -> tuple[bytes, bool]:
        """The reply to the client's ``index``-th message, and whether the exchange is done."""
        text = message.decode()  # UnicodeDecodeError: a failure (the caller's except)
        if index == 0:
            if not text.startswith(("n,,", "y,,")):
                raise _Failed("channel binding or an authorization identity was asked for")
            self._server = ScramMechanism(self.mechanism).make_server(
                self._auth_info, s_nonce=self._nonce
            )
            self._server.set_client_first(text)
            return self._server.get_server_first().encode(), False
        self._server.set_client_final(text)  # ScramException: a wrong proof
        if not self._known:
            raise _Failed("unknown user")
        return self._server.get_server_final().encode(), True


def check_plain(
    message: bytes, credentials: CredentialCache, secret: bytes
) -> tuple[str, str, ScramCredential, str]:
    """Parse a PLAIN message: (user, password, the credential to check, its mechanism)."""
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise _Failed("a PLAIN message is authzid NUL user NUL password")
    authzid, name, password = (part.decode() for part in parts)
    if authzid and authzid != name:
        raise _Failed("an authorization identity other than the user")
    mechanism = credentials.mechanism_of(name) or SCRAM_MECHANISMS[0]
    credential = credentials.get(name, mechanism) or _fake_credential(secret, mechanism, name)
    return name, password, credential, mechanism


def credential_for(
    name: str, credentials: CredentialCache, secret: bytes
) -> tuple[ScramCredential, str, bool]:
    """The credential a password for ``name`` is checked against, its mechanism, and
    whether the user exists: an unknown user gets a stable fake one, so that checking
    costs the same PBKDF2 either way (PLAIN, and the HTTP listener's Basic auth)."""
    mechanism = credentials.mechanism_of(name) or SCRAM_MECHANISMS[0]
    found = credentials.get(name, mechanism)
    return found or _fake_credential(secret, mechanism, name), mechanism, found is not None


def password_matches(password: str, credential: ScramCredential, mechanism: str) -> bool:
    """Whether ``password`` derives ``credential``'s stored key (PBKDF2: a few ms; run it
    in a worker thread)."""
    derived = make_credential(
        mechanism, password, iterations=credential.iterations, salt=credential.salt
    )
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


@dataclass
class SaslSession:
    mechanism: str
    exchange: ScramExchange | None
    steps: int = 0
    busy: bool = False


async def authenticate(
    broker: Broker, ctx: RequestContext, body: AuthenticateRequest
) -> AuthenticateResponse:
    """One step of the connection's SASL exchange (see the module docstring)."""
    if not ctx.listener.startswith("SASL_"):
        raise IllegalSaslStateError(f"this listener ({ctx.listener}) does not use SASL")
    if ctx.authenticated:
        raise IllegalSaslStateError("the connection has already authenticated")
    session: SaslSession | None = ctx.sasl
    mechanism = body["mechanism"]
    if session is None:
        if mechanism not in MECHANISMS:
            ctx.disconnect = "an unsupported SASL mechanism"
            raise UnsupportedSaslMechanismError(
                f"SASL mechanism {mechanism!r} is not enabled: {', '.join(MECHANISMS)}"
            )
        if mechanism == "PLAIN" and ctx.listener != "SASL_SSL":
            ctx.disconnect = "PLAIN without TLS"
            raise UnsupportedSaslMechanismError(
                "PLAIN sends the password itself: it is enabled only on a TLS listener "
                "(sasl_ssl); use SCRAM-SHA-256 or SCRAM-SHA-512 here"
            )
        exchange = (
            None
            if mechanism == "PLAIN"
            else ScramExchange(mechanism, broker.scram_credentials, broker.credentials.secret)
        )
        session = ctx.sasl = SaslSession(mechanism, exchange)
    if session.busy or mechanism != session.mechanism:
        ctx.disconnect = "an out-of-order SASL step"
        raise IllegalSaslStateError("one SASL step at a time, all with the same mechanism")
    session.busy = True
    try:
        user, reply, done = await _step(broker, session, body["auth_bytes"])
    except Exception as exc:  # any failure, malformed input included: one answer
        await _failed(broker, ctx, exc)
    finally:
        session.busy = False
    if done:
        ctx.sasl = None
        ctx.principal = f"User:{user}"
        ctx.authenticated = True
        stats.succeeded += 1
    return {"auth_bytes": reply, "complete": done, "session_lifetime_ms": 0}


async def _step(broker: Broker, session: SaslSession, message: bytes) -> tuple[str, bytes, bool]:
    index = session.steps
    session.steps += 1
    if index >= MAX_STEPS:
        raise _Failed(f"more than {MAX_STEPS} SASL messages")
    if len(message) > MAX_SASL_MESSAGE_BYTES:
        raise _Failed(f"a SASL message of {len(message)} bytes")
    if session.exchange is not None:
        reply, done = session.exchange.step(message, index)
        return session.exchange.user or "", reply, done
    if index > 0:
        raise _Failed("PLAIN takes one message")
    name, password, credential, mechanism = check_plain(
        message, broker.scram_credentials, broker.credentials.secret
    )
    matches = await asyncio.to_thread(password_matches, password, credential, mechanism)
    if not matches or broker.scram_credentials.get(name, mechanism) is None:
        raise _Failed("wrong password or unknown user")
    return name, b"", True


async def _failed(broker: Broker, ctx: RequestContext, exc: BaseException) -> NoReturn:
    """Count, log (rate-limited), wait the failure delay, and raise the one answer."""
    stats.failed += 1
    log.debug("authentication from %s failed: %s", ctx.peer, exc)
    now = time.monotonic()
    if now - stats._last_log >= LOG_INTERVAL_S:
        log.warning(
            "failed SASL authentication from %s (%d more since the last warning, %d in all)",
            ctx.peer,
            stats._unlogged,
            stats.failed,
        )
        stats._last_log, stats._unlogged = now, 0
    else:
        stats._unlogged += 1
    ctx.disconnect = "failed authentication"
    await asyncio.sleep(broker.config.sasl_failed_authentication_delay_ms / 1000)
    raise SaslAuthenticationFailedError(
        "authentication failed: invalid user name or password (or a malformed SASL exchange)"
    )

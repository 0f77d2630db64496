"""Listeners: where a broker accepts connections, and how each one is secured.

A listener is ``SCHEME://HOST:PORT`` (``mq serve --listener``, or ``listeners =
[...]`` in the TOML config), SCHEME one of Kafka's security protocols:

=================  ============  ===========================================
scheme             TLS           authentication
=================  ============  ===========================================
``plaintext``      no            none (every connection is User:ANONYMOUS)
``ssl``            yes           the client certificate's subject when
                                 ``tls_client_ca`` is set (mutual TLS)
``sasl_plaintext`` no            SASL SCRAM-SHA-256/512 (PLAIN is refused)
``sasl_ssl``       yes           SASL SCRAM-SHA-256/512 or PLAIN
=================  ============  ===========================================

A listener's **name** is its scheme in capitals (``SASL_SSL``), so a broker has at
most one listener of each scheme (Kafka lets names and protocols differ; mq keeps
them equal until someone needs two listeners of one protocol). With no listener
configured the broker has exactly the one of the embedded default: ``plaintext``
on ``--host``/``--port`` (127.0.0.1:9292).

Every listener is registered in the metadata store with the broker
(:class:`~mq.replication.membership.BrokerInfo` ``endpoints``). A client's metadata
response gives each broker's address *on the listener the client connected
through*, as Kafka's advertised listeners do, so a client of the TLS port is never
sent to a plaintext one. Brokers connect to each other through the listener named
by ``inter_broker_listener`` (default: the first listener); its address is the one
:class:`~mq.replication.membership.BrokerInfo` ``host``/``port`` carry.

TLS: the standard :mod:`ssl` module (uvloop's ``create_server`` takes its
contexts), TLS 1.2 and later only, no TLS compression; with TLS 1.2 only
forward-secret AEAD suites (:data:`SERVER_CIPHERS`).

Thread safety: pure functions and frozen values.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from mq.broker.principals import Rule, parse_rules, principal_for
from mq.client.security import Security
from mq.errors import InvalidConfigError, ProtocolError

if TYPE_CHECKING:
    from mq.broker.config import BrokerConfig
    from mq.broker.context import RequestContext

SCHEMES = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""A TLS handshake not finished in this long closes the connection (a client that opens
sockets and never completes the handshake holds no descriptor for longer)."""


@dataclass(frozen=True)
class Listener:
    scheme: str
    """One of :data:`SCHEMES` (lower case)."""
    host: str
    port: int

    @property
    def name(self) -> str:
        """The listener's name: its scheme in capitals (``SASL_SSL``)."""
        return self.scheme.upper()

    @property
    def tls(self) -> bool:
        return self.scheme in ("ssl", "sasl_ssl")

    @property
    def sasl(self) -> bool:
        return self.scheme.startswith("sasl_")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


class Endpoint(NamedTuple):
    """A registered listener of a broker: its name and advertised address."""

    name: str
    host: str
    port: int


def parse_listener(text: str) -> Listener:
    """``SCHEME://HOST:PORT`` → a :class:`Listener` (INVALID_CONFIG naming what is wrong)."""
    scheme, sep, rest = text.strip().partition("://")
    scheme = scheme.lower()
    parts = urlsplit(f"tcp://{rest}")  # urlsplit takes no '_' in a scheme
    if not sep or scheme not in SCHEMES:
        raise InvalidConfigError(
            f"listener {text!r}: the scheme must be one of {', '.join(SCHEMES)}"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise InvalidConfigError(f"listener {text!r}: {exc}") from exc
    if port is None or parts.hostname is None or parts.path or parts.query:
        raise InvalidConfigError(f"listener {text!r}: expected {scheme}://HOST:PORT")
    return Listener(scheme, parts.hostname, port)


def listeners_of(config: BrokerConfig) -> list[Listener]:
    """The broker's listeners: the configured ones, else plaintext on host:port."""
    if not config.listeners:
        return [Listener("plaintext", config.host, config.port)]
    return [parse_listener(text) for text in config.listeners]


def inter_broker(config: BrokerConfig, listeners: Sequence[Listener]) -> Listener:
    """The listener other brokers connect to (``inter_broker_listener``, else the first)."""
    wanted = config.inter_broker_listener
    if wanted is None:
        return listeners[0]
    for listener in listeners:
        if listener.name == wanted.upper():
            return listener
    raise InvalidConfigError(
        f"inter_broker_listener {wanted!r} names no listener of this broker "
        f"({', '.join(lst.name for lst in listeners)})"
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check(config: BrokerConfig) -> None:
    """Refuse settings that cannot work or that expose the broker (INVALID_CONFIG).

    A listener on a non-loopback address must use TLS *and* authenticate its
    clients (``sasl_ssl``, or ``ssl`` with ``tls_client_ca``), unless ``insecure``:
    anyone on the network could otherwise read, write and delete every topic.
    """
    listeners = listeners_of(config)
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise InvalidConfigError(
            f"listeners {names}: at most one listener per scheme (a listener's name is its scheme)"
        )
    ib = inter_broker(config, listeners)
    parse_rules(config.ssl_principal_mapping_rules)
    if config.inter_broker_sasl_mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
        raise InvalidConfigError(
            "inter_broker_sasl_mechanism must be SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN"
        )
    if (
        ib.sasl
        and config.metadata is not None  # a single node opens no inter-broker connection
        and (config.inter_broker_sasl_username is None or config.inter_broker_sasl_password is None)
    ):
        raise InvalidConfigError(
            f"the inter-broker listener is {ib.name}: set inter_broker_sasl_username and "
            "inter_broker_sasl_password (a user made with `mq user add`)"
        )
    needs_tls = [str(listener) for listener in listeners if listener.tls]
    if needs_tls and (config.tls_cert is None or config.tls_key is None):
        raise InvalidConfigError(f"{', '.join(needs_tls)}: TLS needs tls_cert and tls_key")
    if config.insecure:
        return
    for listener in listeners:
        authenticated = listener.sasl or config.tls_client_ca is not None
        if not is_loopback(listener.host) and not (listener.tls and authenticated):
            raise InvalidConfigError(
                f"refusing to listen on {listener}: a non-loopback address needs TLS and "
                "authentication (sasl_ssl, or ssl with --tls-client-ca), or anyone who can "
                "reach it can read, write and delete every topic; pass --insecure to "
                "listen anyway"
            )


SERVER_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS"
"""TLS 1.2 suites the broker accepts: forward secrecy and AEAD only (TLS 1.3's suites are
all of that kind and are not affected by this list)."""


def _harden(context: ssl.SSLContext) -> ssl.SSLContext:
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    return context


def server_context(config: BrokerConfig) -> ssl.SSLContext:
    """The TLS context of the broker's TLS listeners (client certificates required when
    ``tls_client_ca`` is set)."""
    assert config.tls_cert is not None
    assert config.tls_key is not None
    context = _harden(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    context.set_ciphers(SERVER_CIPHERS)
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
        if config.tls_client_ca is not None:
            context.load_verify_locations(cafile=config.tls_client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(f"cannot load the broker's TLS files: {exc}") from exc
    return context


def broker_client_context(config: BrokerConfig) -> ssl.SSLContext:
    """The TLS context a broker connects to other brokers with: it trusts
    ``tls_trust_ca`` (default ``tls_client_ca``) and shows its own certificate."""
    cafile = config.tls_trust_ca or config.tls_client_ca
    context = _harden(ssl.create_default_context(cafile=cafile))
    if config.tls_cert is not None and config.tls_key is not None:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    return context


def endpoints(listeners: Iterable[Listener], bound: dict[str, int]) -> list[Endpoint]:
    """What the broker registers: each listener's name, host and bound port."""
    return [Endpoint(lst.name, lst.host, bound[lst.name]) for lst in listeners]


def address_on(
    endpoints_: Sequence[Sequence[object]], listener: str | None, default: tuple[str, int]
) -> tuple[str, int] | None:
    """A broker's address on ``listener``: ``default`` (its registered host and port) for
    a broker that registered no listeners (an older version), None for one that has no
    listener of that name (a client of that listener cannot reach it: Kafka leaves such
    brokers out of its metadata too)."""
    if not endpoints_:
        return default
    for entry in endpoints_:
        if entry[0] == listener:
            return str(entry[1]), int(str(entry[2]))
    return None


TLS_RECORD_START = (b"\x16\x03",)
"""A TLS handshake record starts with content type 22 and major version 3: as an mq
frame's length prefix that is ~369 MB, never a legal frame."""


def plaintext_check(listener: Listener | None, first: bytes) -> None:
    """A TLS client on a plaintext listener: PROTOCOL_ERROR saying so (the connection
    closes; the client's TLS handshake fails at once)."""
    if (listener is None or not listener.tls) and first.startswith(TLS_RECORD_START):
        raise ProtocolError(
            "a TLS handshake on a plaintext listener: the client uses TLS (ssl/sasl_ssl) "
            "where the broker does not"
        )


def tls_identity(
    ctx: RequestContext, transport: asyncio.BaseTransport, rules: Sequence[Rule]
) -> str | None:
    """Set a mutual-TLS connection's principal from its verified certificate; why the
    connection is refused, or None. Without client certificates it stays anonymous."""
    if not ctx.authenticates or ctx.listener != "SSL":
        return None  # SASL_SSL: SASL names the principal; the certificate was verified
    principal = principal_for(transport.get_extra_info("peercert"), rules)
    if principal is None:
        return "its client certificate maps to no principal (ssl_principal_mapping_rules)"
    ctx.principal = principal
    ctx.authenticated = True
    return None


def broker_security(config: BrokerConfig) -> Security | None:
    """How this broker connects to the others: through the inter-broker listener, with
    ``inter_broker_sasl_*`` on a SASL one and its own certificate on a TLS one."""
    listener = inter_broker(config, listeners_of(config))
    if not listener.tls and not listener.sasl:
        return None
    if listener.sasl and (
        config.inter_broker_sasl_username is None or config.inter_broker_sasl_password is None
    ):
        return None  # a single node (check() requires them in a cluster): never used
    return Security(
        listener.name,
        config.inter_broker_sasl_mechanism,
        config.inter_broker_sasl_username,
        config.inter_broker_sasl_password,
        broker_client_context(config) if listener.tls else None,
    )

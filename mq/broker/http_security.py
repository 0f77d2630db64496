"""When the HTTP listener authenticates, and when it must use TLS (issues 19 and 21).

The HTTP listener (``http_port``: metrics, health, the JSON admin API, the web
console) is secured like the binary listeners it sits beside:

* it **authenticates** (HTTP Basic against the broker's SCRAM users,
  :mod:`mq.http.auth`) as soon as the broker authorizes requests
  (``authorizer = "acl"``) or any binary listener authenticates its clients (SASL,
  or TLS with ``tls_client_ca``): whoever needs a password on the binary port needs
  one here. The zero-config ``mq serve --http-port N`` stays open;
* Basic sends the password in every request, so an authenticating listener on a
  host that is not loopback **serves HTTPS** with the broker's ``tls_cert`` and
  ``tls_key`` (``http_tls = "auto"``), and the broker refuses to start if it cannot
  (no certificate, or ``http_tls = "off"``) unless ``insecure`` is set, the rule
  :func:`mq.broker.listeners.check` applies to the binary listeners.

The HTTP listener binds the inter-broker listener's host (what
:class:`mq.broker.server.Server` passes it), so that is the host checked here. Its
admin API reads through that listener as a broker (:meth:`mq.broker.peers.Peers.call_node`,
this node included), so on a SASL one the broker's own SASL user is required even
on a single node.

Pure functions of the configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mq.broker.listeners import inter_broker, is_loopback, listeners_of
from mq.errors import InvalidConfigError

if TYPE_CHECKING:
    from mq.broker.config import BrokerConfig

HTTP_TLS_MODES = ("auto", "on", "off")


def http_auth_on(config: BrokerConfig) -> bool:
    """Whether every HTTP route but the probes needs a user and password (see the module)."""
    return config.authorizer == "acl" or any(
        spec.sasl or (spec.tls and config.tls_client_ca is not None)
        for spec in listeners_of(config)
    )


def http_host(config: BrokerConfig) -> str:
    """The host the HTTP listener binds (the inter-broker listener's)."""
    return inter_broker(config, listeners_of(config)).host


def http_tls_on(config: BrokerConfig) -> bool:
    """Whether the HTTP listener serves HTTPS."""
    if config.http_tls == "on":
        return True
    if config.http_tls == "off":
        return False
    return http_auth_on(config) and not is_loopback(http_host(config))


def check(config: BrokerConfig) -> None:
    """INVALID_CONFIG for an HTTP listener that would send passwords in clear, or
    whose TLS has no certificate."""
    if config.http_tls not in HTTP_TLS_MODES:
        raise InvalidConfigError(
            f"http_tls must be one of {', '.join(HTTP_TLS_MODES)}, got {config.http_tls!r}"
        )
    if config.http_port is None:
        return
    ib = inter_broker(config, listeners_of(config))
    if ib.sasl and (
        config.inter_broker_sasl_username is None or config.inter_broker_sasl_password is None
    ):
        raise InvalidConfigError(
            f"the HTTP admin API reads groups, offsets and records as a broker, through the "
            f"inter-broker listener ({ib.name}), this node included: set "
            "inter_broker_sasl_username and inter_broker_sasl_password (a user made with "
            "`mq user add`) even on a single node"
        )
    wants_tls = http_auth_on(config) and not is_loopback(http_host(config))
    has_cert = config.tls_cert is not None and config.tls_key is not None
    if http_tls_on(config) and not has_cert:
        if config.http_tls == "on":
            raise InvalidConfigError("http_tls = on: the HTTP listener needs tls_cert and tls_key")
        if not config.insecure:
            raise InvalidConfigError(
                f"refusing to serve HTTP on {http_host(config)}: the listener asks for "
                "passwords (HTTP Basic) and a non-loopback address needs TLS for them; set "
                "tls_cert and tls_key (--tls-cert, --tls-key), or pass --insecure to send "
                "them in clear anyway"
            )
    elif wants_tls and config.http_tls == "off" and not config.insecure:
        raise InvalidConfigError(
            f"refusing to serve HTTP on {http_host(config)} with http_tls = off: the listener "
            "asks for passwords (HTTP Basic) and a non-loopback address needs TLS for them; "
            "pass --insecure to send them in clear anyway"
        )


def serves_tls(config: BrokerConfig) -> bool:
    """Whether the listener actually serves HTTPS: :func:`http_tls_on` with a
    certificate (``auto`` with ``insecure`` and no certificate serves plain HTTP)."""
    return http_tls_on(config) and config.tls_cert is not None and config.tls_key is not None

"""Kafka's ``kafka.security.protocol`` / ``kafka.sasl.*`` / ``kafka.ssl.*`` options as
mq's client security settings.

:func:`parse_security` checks the options once, where Spark resolves the schema
(a mistake fails ``load()`` naming the option), into a :class:`Security` that
travels to the executors; :func:`client_kwargs` turns it into the keyword
arguments of mq's clients: ``security_protocol``, ``sasl_mechanism``,
``sasl_plain_username``, ``sasl_plain_password`` and ``ssl_cafile`` or
``ssl_context``, each only when set (a job without security options passes
none). The password never appears in a repr, a log line or an error message.

What maps:

=====================================================  ==============================
Kafka option                                           mq client
=====================================================  ==============================
``kafka.security.protocol`` PLAINTEXT/SSL/SASL_*       ``security_protocol``
``kafka.sasl.mechanism`` PLAIN/SCRAM-SHA-256/512       ``sasl_mechanism``
``kafka.sasl.jaas.config`` (Plain/ScramLoginModule)    ``sasl_plain_username``/``_password``
``kafka.ssl.truststore.location`` (PEM)                ``ssl_cafile``
``kafka.ssl.truststore.certificates`` (PEM text)       ``ssl_context``
``kafka.ssl.keystore.location`` (PEM), ``.key.password``  ``ssl_context`` (client certificate)
``kafka.ssl.endpoint.identification.algorithm`` ""     ``ssl_context`` without host check
=====================================================  ==============================

Java key stores (JKS, PKCS12) cannot be read by Python's ``ssl``: they are refused
with the command that converts them to PEM. Pure but for :func:`client_kwargs`
building an ``ssl.SSLContext`` from files (no network).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from spark_connector.kafka_names import OptionError

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES: Final = {"PLAIN": "PlainLoginModule", "SCRAM": "ScramLoginModule"}

_KNOWN: Final = {
    "kafka.security.protocol",
    "kafka.sasl.mechanism",
    "kafka.sasl.jaas.config",
    "kafka.ssl.truststore.location",
    "kafka.ssl.truststore.type",
    "kafka.ssl.truststore.certificates",
    "kafka.ssl.truststore.password",
    "kafka.ssl.keystore.location",
    "kafka.ssl.keystore.type",
    "kafka.ssl.keystore.password",
    "kafka.ssl.key.password",
    "kafka.ssl.endpoint.identification.algorithm",
}
_PEM_HINT: Final = (
    "mq's client reads PEM only: convert with `keytool -importkeystore -srckeystore X.jks "
    "-destkeystore X.p12 -deststoretype PKCS12` then `openssl pkcs12 -in X.p12 -out X.pem`, "
    "and set the .type option to PEM"
)


@dataclass(frozen=True)
class Security:
    """Checked security settings; empty (all None) for a plaintext job."""

    protocol: str | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: str | None = None
    cadata: str | None = field(default=None, repr=False)
    certfile: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


def parse_security(options: Mapping[str, str]) -> Security:
    """The security options of ``options`` (lower-case names, as :func:`canonical`
    leaves them), checked; OptionError naming the option otherwise."""
    given = {k: v for k, v in options.items() if k.startswith(("kafka.sasl.", "kafka.ssl."))}
    unknown = sorted(set(given) - _KNOWN)
    if unknown:
        raise OptionError(
            f"option(s) {', '.join(unknown)} are not supported by mq's client; the "
            f"security options are {', '.join(sorted(_KNOWN))}"
        )
    raw_protocol = options.get("kafka.security.protocol")
    protocol = None
    if raw_protocol is not None:
        protocol = raw_protocol.strip().upper()
        if protocol not in PROTOCOLS:
            raise OptionError(
                f"kafka.security.protocol is one of {', '.join(PROTOCOLS)}, not {raw_protocol!r}"
            )
    sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
    tls = protocol in ("SSL", "SASL_SSL")
    for name in sorted(given):
        if name.startswith("kafka.sasl.") and not sasl:
            raise OptionError(
                f"option {name} needs kafka.security.protocol SASL_PLAINTEXT or SASL_SSL, "
                f"not {protocol or 'unset (PLAINTEXT)'}"
            )
        if name.startswith("kafka.ssl.") and not tls:
            raise OptionError(
                f"option {name} needs kafka.security.protocol SSL or SASL_SSL, "
                f"not {protocol or 'unset (PLAINTEXT)'}"
            )
    mechanism = username = password = None
    if sasl:
        mechanism, username, password = _sasl(options)
    return Security(
        protocol=protocol,
        mechanism=mechanism,
        username=username,
        password=password,
        **(_tls(options) if tls else {}),
    )


def _sasl(options: Mapping[str, str]) -> tuple[str, str, str]:
    raw = options.get("kafka.sasl.mechanism")
    if raw is None:
        raise OptionError(
            "kafka.sasl.mechanism is required with SASL: PLAIN, SCRAM-SHA-256 or "
            "SCRAM-SHA-512 (Kafka's default, GSSAPI/Kerberos, is not supported by mq)"
        )
    mechanism = raw.strip().upper()
    if mechanism not in MECHANISMS:
        raise OptionError(f"kafka.sasl.mechanism is one of {', '.join(MECHANISMS)}, not {raw!r}")
    jaas = options.get("kafka.sasl.jaas.config")
    if jaas is None:
        raise OptionError(
            "kafka.sasl.jaas.config is required with SASL, e.g. "
            "'org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="alice" password="...";\''
        )
    module, entries = parse_jaas(jaas)
    wanted = _LOGIN_MODULES["PLAIN" if mechanism == "PLAIN" else "SCRAM"]
    if module.rsplit(".", 1)[-1] != wanted:
        raise OptionError(
            f"kafka.sasl.jaas.config uses {module.rsplit('.', 1)[-1]}; "
            f"kafka.sasl.mechanism {mechanism} needs {wanted}"
        )
    for key in ("username", "password"):
        if not entries.get(key):
            raise OptionError(f'kafka.sasl.jaas.config has no {key}="..."')
    return mechanism, entries["username"], entries["password"]


_JAAS = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s+(.*?);?\s*$", re.S)
_ENTRY = re.compile(r'\s*([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``Module required key="value" ...;`` as (module, {key: value}). The error never
    repeats the text (it holds a password)."""
    match = _JAAS.match(text)
    if match is None:
        raise OptionError(
            "kafka.sasl.jaas.config is not '<LoginModule class> required key=\"value\" ...;'"
        )
    module, _, body = match.groups()
    entries: dict[str, str] = {}
    position = 0
    body = body.strip()
    while position < len(body):
        entry = _ENTRY.match(body, position)
        if entry is None:
            raise OptionError(
                f"kafka.sasl.jaas.config: cannot read the entries after character {position} "
                'of the module\'s options (expected key="value")'
            )
        key, quoted, bare = entry.groups()
        entries[key] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        position = entry.end()
        while position < len(body) and body[position].isspace():
            position += 1
    return module, entries


def _tls(options: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    trust_type = options.get("kafka.ssl.truststore.type", "PEM").strip().upper()
    location = options.get("kafka.ssl.truststore.location")
    certificates = options.get("kafka.ssl.truststore.certificates")
    if trust_type != "PEM":
        raise OptionError(f"kafka.ssl.truststore.type {trust_type} is not supported: {_PEM_HINT}")
    if location is not None and certificates is not None:
        raise OptionError(
            "give kafka.ssl.truststore.location or kafka.ssl.truststore.certificates, not both"
        )
    if location is not None:
        if location.lower().endswith((".jks", ".p12", ".pfx")):
            raise OptionError(f"kafka.ssl.truststore.location {location!r}: {_PEM_HINT}")
        out["cafile"] = location
    if certificates is not None:
        if "BEGIN CERTIFICATE" not in certificates:
            raise OptionError("kafka.ssl.truststore.certificates is not PEM text")
        out["cadata"] = certificates
    key_type = options.get("kafka.ssl.keystore.type", "PEM").strip().upper()
    if key_type != "PEM":
        raise OptionError(f"kafka.ssl.keystore.type {key_type} is not supported: {_PEM_HINT}")
    keystore = options.get("kafka.ssl.keystore.location")
    if keystore is not None:
        out["certfile"] = keystore
        out["key_password"] = options.get("kafka.ssl.key.password") or options.get(
            "kafka.ssl.keystore.password"
        )
    elif "kafka.ssl.key.password" in options:
        raise OptionError("kafka.ssl.key.password is set without kafka.ssl.keystore.location")
    algorithm = options.get("kafka.ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        if algorithm.strip().lower() not in ("", "https"):
            raise OptionError(
                "kafka.ssl.endpoint.identification.algorithm is https or empty (no host "
                f"name check), not {algorithm!r}"
            )
        out["check_hostname"] = algorithm.strip().lower() == "https"
    return out


def client_kwargs(security: Security) -> dict[str, Any]:
    """The keyword arguments of mq's clients for ``security``: none for a plaintext job."""
    out: dict[str, Any] = {}
    if security.protocol is None:
        return out
    out["security_protocol"] = security.protocol
    if security.mechanism is not None:
        out["sasl_mechanism"] = security.mechanism
        out["sasl_plain_username"] = security.username
        out["sasl_plain_password"] = security.password
    if security.uses_tls:
        if security.cadata is None and security.certfile is None and security.check_hostname:
            if security.cafile is not None:
                out["ssl_cafile"] = security.cafile
        else:
            out["ssl_context"] = ssl_context(security)
    return out


def ssl_context(security: Security) -> ssl.SSLContext:
    """A client TLS context for ``security`` (its files are read here)."""
    context = ssl.create_default_context(cafile=security.cafile, cadata=security.cadata)
    if not security.check_hostname:
        context.check_hostname = False
    if security.certfile is not None:
        context.load_cert_chain(security.certfile, password=security.key_password)
    return context

"""From a verified client certificate to a principal (mutual TLS).

Rules are Kafka's ``ssl.principal.mapping.rules``, one per list entry (the
``ssl_principal_mapping_rules`` setting), tried in order against the
certificate's subject written as RFC 2253 does (``CN=alice,OU=eng,O=Acme``,
the most specific attribute first):

* ``RULE:pattern/replacement/`` — when the regular expression ``pattern``
  matches the *whole* subject, the user name is ``replacement`` with ``$1``,
  ``$2``... standing for the groups; a trailing ``L`` or ``U``
  (``RULE:.../.../L``) lower- or upper-cases the result;
* ``DEFAULT`` — the subject's common name (CN). This differs from Kafka, whose
  default is the whole subject: a CN is what people put in ACLs.

The principal is ``User:<name>``. A certificate that no rule maps (no CN and no
matching rule) is refused at the first request (SASL_AUTHENTICATION_FAILED).

Thread safety: pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mq.errors import InvalidConfigError

DEFAULT = "DEFAULT"
_RULE = re.compile(
    r"RULE:(?P<pattern>(?:[^/\\]|\\.)*)/(?P<replacement>(?:[^/\\]|\\.)*)/(?P<case>[LU]?)"
)

_RFC2253_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "userId": "UID",
    "streetAddress": "STREET",
}


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None
    """None: the DEFAULT rule."""
    replacement: str = ""
    case: str = ""

    def apply(self, subject: str, cn: str | None) -> str | None:
        if self.pattern is None:
            return cn
        match = self.pattern.fullmatch(subject)
        if match is None:
            return None
        name = re.sub(r"\$(\d)", lambda m: match.group(int(m.group(1))) or "", self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def parse_rules(texts: Sequence[str]) -> list[Rule]:
    """The rules of the setting (INVALID_CONFIG naming a malformed one)."""
    rules = []
    for text in texts:
        text = text.strip()
        if text == DEFAULT:
            rules.append(Rule(None))
            continue
        found = _RULE.fullmatch(text)
        if found is None:
            raise InvalidConfigError(
                f"ssl_principal_mapping_rules: {text!r} is neither DEFAULT nor "
                "RULE:pattern/replacement/[L|U]"
            )
        try:
            pattern = re.compile(found["pattern"])
        except re.error as exc:
            raise InvalidConfigError(f"ssl_principal_mapping_rules: {text!r}: {exc}") from exc
        rules.append(Rule(pattern, found["replacement"], found["case"]))
    return rules


def subject_of(certificate: dict[str, Any]) -> tuple[str, str | None]:
    """The subject of :meth:`ssl.SSLSocket.getpeercert`'s dict as RFC 2253 text, and its CN."""
    rdns = certificate.get("subject", ())
    parts: list[str] = []
    cn = None
    for rdn in reversed(rdns):  # RFC 2253: the most specific attribute first
        for key, value in rdn:
            short = _RFC2253_NAMES.get(key, key)
            escaped = re.sub(r'([,+"\\<>;])', r"\\\1", str(value))
            parts.append(f"{short}={escaped}")
            if short == "CN" and cn is None:
                cn = str(value)
    return ",".join(parts), cn


def principal_for(certificate: dict[str, Any] | None, rules: Sequence[Rule]) -> str | None:
    """``User:<name>`` for a verified certificate, or None if no rule names it."""
    if not certificate:
        return None
    subject, cn = subject_of(certificate)
    for rule in rules:
        name = rule.apply(subject, cn)
        if name:
            return f"User:{name}"
    return None

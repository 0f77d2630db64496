"""Certificates for the TLS tests, made by the test itself with ``cryptography``.

:func:`make_pki` writes a CA and certificates signed by it into a directory:
a server certificate for 127.0.0.1 / localhost, one expired, one for another host,
and client certificates (for mutual TLS) with the common names asked for
(the primitives are :mod:`mq.local_pki`'s).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mq.local_pki import Pair, make_ca, make_leaf, write_ca, write_pem

__all__ = ["Pair", "Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: Pair
    """For 127.0.0.1 and localhost; a broker also shows it as its client certificate."""
    expired: Pair
    wrong_host: Pair
    clients: dict[str, Pair]
    other_ca: Path
    """A CA that signed nothing here: trusting only it refuses the broker."""


def make_pki(directory: Path, clients: tuple[str, ...] = ("alice",)) -> Pki:
    """A CA and its certificates in ``directory`` (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca("mq test CA")
    local = ["127.0.0.1", "localhost"]
    return Pki(
        ca=write_ca(directory, "ca", ca),
        server=write_pem(directory, "server", *make_leaf(ca, "broker", hosts=local)),
        expired=write_pem(
            directory, "expired", *make_leaf(ca, "broker", hosts=local, expired=True)
        ),
        wrong_host=write_pem(
            directory, "wrong-host", *make_leaf(ca, "elsewhere", hosts=["mq.example.com"])
        ),
        clients={
            name: write_pem(directory, f"client-{name}", *make_leaf(ca, name, client=True))
            for name in clients
        },
        other_ca=write_ca(directory, "other-ca", make_ca("another CA")),
    )

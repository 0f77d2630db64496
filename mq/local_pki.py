"""A throwaway certificate authority for local clusters: ``mq chaos --secure`` and tests.

:func:`make_ca` and :func:`make_leaf` make an EC P-256 CA and certificates it signs
(server and client use, the hosts as subject alternative names);
:func:`write_pem` stores a certificate and its unencrypted key; :func:`local_pki`
makes the whole set a local secured cluster needs. The keys are not protected: for
clusters on this machine that live as long as a test or a chaos run, never for a
real deployment (use your own CA there; README, "Security").
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS: Final = 30
"""Lifetime of the certificates made here: longer than any local run, short enough
that a forgotten one expires."""

Issuer = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class LocalPki:
    ca: Path
    server: Pair
    """For the hosts given (and localhost); a broker also shows it as its client
    certificate (its subject is CN=broker)."""


def name(cn: str, org: str = "mq local") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def make_ca(cn: str) -> Issuer:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(cn))
        .issuer_name(name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_leaf(
    ca: Issuer,
    cn: str,
    *,
    hosts: list[str] | None = None,
    expired: bool = False,
    client: bool = False,
) -> Issuer:
    """A certificate signed by ``ca``: for servers and clients, or (``client``) for
    clients only; ``expired`` ended yesterday."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start, end = (
        (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
        if expired
        else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=VALID_DAYS))
    )
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if not client:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(cn))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca[1], hashes.SHA256()), key


def write_pem(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Pair:
    """``stem.pem`` (the certificate) and ``stem.key`` (its key, PKCS#8, owner-only)."""
    cert_path = directory / f"{stem}.pem"
    key_path = directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.touch(mode=0o600)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Pair(cert_path, key_path)


def write_ca(directory: Path, stem: str, ca: Issuer) -> Path:
    path = directory / f"{stem}.pem"
    path.write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    return path


def local_pki(directory: Path, hosts: list[str]) -> LocalPki:
    """A CA (``ca.pem``) and a broker certificate for ``hosts`` and localhost, in
    ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca("mq local CA")
    server = make_leaf(ca, "broker", hosts=[*hosts, "localhost"])
    return LocalPki(
        ca=write_ca(directory, "ca", ca), server=write_pem(directory, "server", *server)
    )

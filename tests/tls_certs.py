"""Certificates for the TLS tests, made by the test itself with ``cryptography``.

:func:`make_pki` writes a CA and certificates signed by it into a directory:
a server certificate for 127.0.0.1 / localhost, one expired, one for another host,
and client certificates (for mutual TLS) with the common names asked for.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


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


def _name(cn: str, org: str = "mq tests") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Pair:
    cert_path = directory / f"{stem}.pem"
    key_path = directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Pair(cert_path, key_path)


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
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


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    cn: str,
    *,
    hosts: list[str] | None = None,
    expired: bool = False,
    client: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start, end = (
        (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
        if expired
        else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30))
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH]
                if client
                else [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
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


def make_pki(directory: Path, clients: tuple[str, ...] = ("alice",)) -> Pki:
    """A CA and its certificates in ``directory`` (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca("mq test CA")
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    other = _ca("another CA")
    other_path = directory / "other-ca.pem"
    other_path.write_bytes(other[0].public_bytes(serialization.Encoding.PEM))
    local = ["127.0.0.1", "localhost"]
    return Pki(
        ca=ca_path,
        server=_write(directory, "server", *_leaf(ca, "broker", hosts=local)),
        expired=_write(directory, "expired", *_leaf(ca, "broker", hosts=local, expired=True)),
        wrong_host=_write(
            directory, "wrong-host", *_leaf(ca, "elsewhere", hosts=["mq.example.com"])
        ),
        clients={
            name: _write(directory, f"client-{name}", *_leaf(ca, name, client=True))
            for name in clients
        },
        other_ca=other_path,
    )

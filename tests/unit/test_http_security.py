"""When the HTTP listener authenticates and when it must serve HTTPS (mq.broker.http_security):
config validation only, nothing is bound (non-loopback addresses are only written in
configs here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mq.broker.config import BrokerConfig
from mq.broker.http_security import http_auth_on, http_tls_on, serves_tls
from mq.errors import InvalidConfigError

BROKER_USER = {"inter_broker_sasl_username": "broker", "inter_broker_sasl_password": "pw"}
CERT = {"tls_cert": "cert.pem", "tls_key": "key.pem"}  # checked for presence, loaded at start


def config(tmp_path: Path, **settings: Any) -> BrokerConfig:
    return BrokerConfig(data_dir=tmp_path, http_port=0, **settings)


def test_the_quick_start_stays_open_and_plain(tmp_path: Path) -> None:
    plain = config(tmp_path)
    assert not http_auth_on(plain)
    assert not http_tls_on(plain)
    assert not serves_tls(plain)


@pytest.mark.parametrize(
    "settings",
    [
        {"authorizer": "acl"},
        {"listeners": ("plaintext://127.0.0.1:0", "sasl_plaintext://127.0.0.1:0")},
        {"listeners": ("sasl_plaintext://127.0.0.1:0",), **BROKER_USER},
        {"listeners": ("ssl://127.0.0.1:0",), "tls_client_ca": "ca.pem", **CERT},
        # authentication without ACLs: still a password on the binary port, so here too
        {"listeners": ("sasl_plaintext://127.0.0.1:0",), "authorizer": "none", **BROKER_USER},
    ],
)
def test_auth_is_on_when_the_broker_authorizes_or_a_listener_authenticates(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    secured = config(tmp_path, **settings)
    assert http_auth_on(secured)
    assert not http_tls_on(secured)  # loopback: plain HTTP is allowed


def test_a_tls_listener_without_client_certificates_does_not_authenticate(tmp_path: Path) -> None:
    assert not http_auth_on(config(tmp_path, listeners=("ssl://127.0.0.1:0",), **CERT))


def test_non_loopback_with_auth_serves_https_with_the_broker_certificate(tmp_path: Path) -> None:
    secured = config(tmp_path, listeners=("sasl_ssl://10.1.2.3:9093",), **BROKER_USER, **CERT)
    assert http_auth_on(secured)
    assert http_tls_on(secured)
    assert serves_tls(secured)


def test_non_loopback_with_auth_and_http_tls_off_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match=r"refusing to serve HTTP on 10\.1\.2\.3"):
        config(
            tmp_path,
            listeners=("sasl_ssl://10.1.2.3:9093",),
            http_tls="off",
            **BROKER_USER,
            **CERT,
        )


def test_insecure_allows_clear_http_off_loopback(tmp_path: Path) -> None:
    clear = config(
        tmp_path,
        listeners=("sasl_ssl://10.1.2.3:9093",),
        http_tls="off",
        insecure=True,
        **BROKER_USER,
        **CERT,
    )
    assert http_auth_on(clear)
    assert not serves_tls(clear)
    # no certificate at all, insecure: auto falls back to clear HTTP instead of failing
    bare = config(
        tmp_path, listeners=("sasl_plaintext://10.1.2.3:9093",), insecure=True, **BROKER_USER
    )
    assert http_tls_on(bare)
    assert not serves_tls(bare)


def test_http_tls_on_forces_https_even_on_loopback(tmp_path: Path) -> None:
    forced = config(tmp_path, http_tls="on", **CERT)
    assert serves_tls(forced)


def test_http_tls_on_without_a_certificate_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="needs tls_cert and tls_key"):
        config(tmp_path, http_tls="on")


def test_an_unknown_http_tls_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="http_tls must be one of auto, on, off"):
        config(tmp_path, http_tls="yes")


def test_without_an_http_port_nothing_is_asked(tmp_path: Path) -> None:
    # no HTTP listener: no certificate needed whatever http_tls says
    BrokerConfig(data_dir=tmp_path, http_tls="on")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("http_auth_cache_entries", 0),
        ("http_auth_cache_ttl_ms", -1),
        ("http_auth_failures_per_ip", 0),
        ("http_auth_failure_window_ms", 10),
    ],
)
def test_the_bounds_are_range_checked(tmp_path: Path, key: str, value: int) -> None:
    with pytest.raises(InvalidConfigError, match=key):
        config(tmp_path, **{key: value})


def test_a_sasl_inter_broker_listener_needs_the_broker_user_for_the_admin_api(
    tmp_path: Path,
) -> None:
    # the admin API reads through the broker's own connection to itself
    with pytest.raises(InvalidConfigError, match="inter_broker_sasl_username"):
        config(tmp_path, listeners=("sasl_plaintext://127.0.0.1:0",))
    # an inter-broker listener that is not SASL needs no user (the plaintext one first)
    config(tmp_path, listeners=("plaintext://127.0.0.1:0", "sasl_plaintext://127.0.0.1:0"))
    # and no HTTP listener, no such need
    BrokerConfig(data_dir=tmp_path, listeners=("sasl_plaintext://127.0.0.1:0",))

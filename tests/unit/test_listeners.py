"""Listener specs, exposure checks and certificate-to-principal mapping (issue 19): pure."""

from __future__ import annotations

import pytest

from mq.broker.config import BrokerConfig
from mq.broker.listeners import Listener, address_on, inter_broker, listeners_of, parse_listener
from mq.broker.principals import parse_rules, principal_for, subject_of
from mq.errors import InvalidConfigError

CERT = {
    "subject": (
        (("countryName", "FR"),),
        (("organizationName", "Acme, Inc"),),
        (("commonName", "alice"),),
    )
}


def test_listeners_parse() -> None:
    assert parse_listener("SASL_SSL://127.0.0.1:9093") == Listener("sasl_ssl", "127.0.0.1", 9093)
    assert parse_listener("plaintext://[::1]:0") == Listener("plaintext", "::1", 0)
    assert str(parse_listener("ssl://[::1]:1")) == "ssl://[::1]:1"
    for bad in ("tcp://a:1", "ssl://a", "ssl:/a:1", "sasl_ssl://a:99999", "ssl://a:1/x", "a:1"):
        with pytest.raises(InvalidConfigError, match="listener"):
            parse_listener(bad)


def test_the_default_listener_is_plaintext_on_host_and_port() -> None:
    assert listeners_of(BrokerConfig()) == [Listener("plaintext", "127.0.0.1", 9292)]
    config = BrokerConfig(listeners=("sasl_plaintext://127.0.0.1:1", "plaintext://127.0.0.1:2"))
    assert inter_broker(config, listeners_of(config)).name == "SASL_PLAINTEXT"


def test_listener_settings_are_checked() -> None:
    with pytest.raises(InvalidConfigError, match="one listener per scheme"):
        BrokerConfig(listeners=("plaintext://127.0.0.1:1", "plaintext://127.0.0.1:2"))
    with pytest.raises(InvalidConfigError, match="tls_cert and tls_key"):
        BrokerConfig(listeners=("ssl://127.0.0.1:1",))
    with pytest.raises(InvalidConfigError, match="names no listener"):
        BrokerConfig(inter_broker_listener="SASL_SSL")
    with pytest.raises(InvalidConfigError, match="inter_broker_sasl_username"):
        BrokerConfig(listeners=("sasl_plaintext://127.0.0.1:1",), metadata="etcd://127.0.0.1:2379")
    with pytest.raises(InvalidConfigError, match="sasl_failed_authentication_delay_ms"):
        BrokerConfig(sasl_failed_authentication_delay_ms=60_000)
    with pytest.raises(InvalidConfigError, match="ssl_principal_mapping_rules"):
        BrokerConfig(ssl_principal_mapping_rules=("RULE:(/x",))
    with pytest.raises(InvalidConfigError, match="listeners must be a list of strings"):
        BrokerConfig(listeners="plaintext://127.0.0.1:1")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="listeners must be a list of strings"):
        BrokerConfig(listeners=[9292])  # type: ignore[arg-type]


def test_the_subject_is_written_as_rfc_2253() -> None:
    assert subject_of(CERT) == ("CN=alice,O=Acme\\, Inc,C=FR", "alice")


def test_mapping_rules() -> None:
    assert principal_for(CERT, parse_rules(["DEFAULT"])) == "User:alice"
    rules = parse_rules([r"RULE:^CN=([^,]*),O=Acme.*$/$1@acme/U", "DEFAULT"])
    assert principal_for(CERT, rules) == "User:ALICE@ACME"
    only_other = parse_rules([r"RULE:^CN=([^,]*),O=Other$/$1/"])
    assert principal_for(CERT, only_other) is None  # no rule names it: refused
    assert principal_for(None, parse_rules(["DEFAULT"])) is None
    assert (
        principal_for({"subject": ((("organizationName", "x"),),)}, parse_rules(["DEFAULT"]))
        is None
    )


def test_a_broker_address_on_a_listener() -> None:
    endpoints = (("PLAINTEXT", "h", 1), ("SASL_SSL", "h", 2))
    assert address_on(endpoints, "SASL_SSL", ("d", 9)) == ("h", 2)
    assert address_on(endpoints, "SSL", ("d", 9)) is None  # unreachable on SSL: left out
    assert address_on((), "SASL_SSL", ("d", 9)) == ("d", 9)

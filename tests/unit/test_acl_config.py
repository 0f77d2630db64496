"""The authorization settings (issue 19) and the rule table's coverage of the protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

from mq.broker.authorizer import Authorizer, authorization_on
from mq.broker.authorizer_rules import RULES
from mq.broker.config import BrokerConfig
from mq.errors import InvalidConfigError
from mq.wire.registry import all_apis


def test_the_default_is_off_and_acl_turns_it_on() -> None:
    assert BrokerConfig().authorizer == "auto"
    assert not authorization_on(BrokerConfig())
    assert not authorization_on(BrokerConfig(authorizer="none"))
    assert authorization_on(BrokerConfig(authorizer="acl"))


def test_super_users_are_principals() -> None:
    config = BrokerConfig(super_users=("alice", "User:bob"))
    assert config.super_users == ("User:alice", "User:bob")
    assert Authorizer(config).super_users == {"User:alice", "User:bob"}
    again = config.with_overrides(super_users=(*config.super_users, "carol"))
    assert again.super_users == ("User:alice", "User:bob", "User:carol")


def test_the_config_file_takes_a_list(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('authorizer = "acl"\nsuper_users = ["root", "User:ops"]\n')
    config = BrokerConfig.from_file(path)
    assert config.authorizer == "acl"
    assert config.super_users == ("User:root", "User:ops")


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"authorizer": "kafka"}, "authorizer must be one of"),
        ({"super_users": "root"}, "super_users must be a list"),
        ({"super_users": [3]}, "is not a user name"),
        ({"super_users": [":"]}, "is not a user name"),
        ({"max_acls": 0}, "max_acls"),
        ({"max_acls": 100_001}, "max_acls"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, object], complaint: str) -> None:
    with pytest.raises(InvalidConfigError, match=complaint):
        BrokerConfig(**settings)  # type: ignore[arg-type]


def test_every_api_of_the_protocol_has_a_rule() -> None:
    """An API without a rule is refused to everyone but super users and brokers when
    authorization is on: a new API must say what it needs (mq/broker/authorizer_rules.py)."""
    missing = sorted(api.name for api in all_apis() if api.key not in RULES)
    assert missing == []

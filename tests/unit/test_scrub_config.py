"""The scrubber's broker config keys: defaults, 0 turns it off, bad values refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from mq.broker.config import BrokerConfig
from mq.errors import InvalidConfigError


def test_defaults_and_off() -> None:
    config = BrokerConfig()
    assert config.scrub_bytes_per_sec == 16 * 1024 * 1024
    assert config.scrub_interval_ms == 3_600_000
    assert BrokerConfig(scrub_bytes_per_sec=0).scrub_bytes_per_sec == 0


@pytest.mark.parametrize(("key", "value"), [("scrub_bytes_per_sec", -1), ("scrub_interval_ms", 0)])
def test_bad_values_are_refused(key: str, value: int) -> None:
    with pytest.raises(InvalidConfigError, match=key):
        BrokerConfig(**{key: value})


def test_the_keys_are_read_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text("scrub_bytes_per_sec = 1048576\nscrub_interval_ms = 500\n")
    config = BrokerConfig.from_file(path)
    assert (config.scrub_bytes_per_sec, config.scrub_interval_ms) == (1 << 20, 500)

"""The connection bounds' broker settings: defaults, validation, from a TOML file."""

from __future__ import annotations

from pathlib import Path

import pytest

from mq.broker.config import BrokerConfig
from mq.broker.server import sweep_interval_s
from mq.errors import InvalidConfigError

KEYS = (
    "max_pending_request_bytes",
    "max_queued_response_bytes",
    "max_connections",
    "max_connections_per_ip",
    "connections_max_idle_ms",
    "unfinished_frame_timeout_ms",
    "response_stall_timeout_ms",
    "close_linger_ms",
)


def test_defaults_are_kafkas_where_it_has_one() -> None:
    config = BrokerConfig()
    assert config.connections_max_idle_ms == 600_000
    assert config.queued_max_bytes >= config.max_frame_bytes


@pytest.mark.parametrize("key", KEYS)
def test_each_bound_must_be_positive(key: str) -> None:
    with pytest.raises(InvalidConfigError, match=key):
        BrokerConfig(**{key: 0})


def test_the_budget_must_hold_the_largest_frame() -> None:
    with pytest.raises(InvalidConfigError, match="queued_max_bytes"):
        BrokerConfig(max_frame_bytes=8 << 20, queued_max_bytes=(8 << 20) - 1)
    assert BrokerConfig(max_frame_bytes=8 << 20, queued_max_bytes=8 << 20)


def test_the_bounds_are_read_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        "max_connections = 10\nmax_connections_per_ip = 2\nqueued_max_bytes = 209715200\n"
    )
    config = BrokerConfig.from_file(path)
    assert (config.max_connections, config.max_connections_per_ip) == (10, 2)
    assert config.queued_max_bytes == 200 << 20


def test_the_sweep_enforces_a_timeout_within_a_quarter_of_it() -> None:
    assert sweep_interval_s(BrokerConfig()) == 1.0
    assert sweep_interval_s(BrokerConfig(unfinished_frame_timeout_ms=2_000)) == 0.5

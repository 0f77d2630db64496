"""Broker and topic settings parsed strictly (issue 18, F10): ASCII digits only, each
number in its range, a wrong type named, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from mq.broker.catalog import INTERNAL_TOPICS
from mq.broker.config import BrokerConfig
from mq.errors import InvalidConfigError
from mq.queues.config import INTERNAL_TOPIC_NAMES
from mq.storage.config import LogConfig


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('port = "\u00b2"\n', "port must be an integer from 0 to 65535"),
        ('port = "9292"\n', "port must be a number"),
        ("session_timeout_ms = 9223372036854775808\n", "session_timeout_ms must be an integer"),
        ("max_inflight_requests = true\n", "max_inflight_requests must be an integer"),
        ('auto_create_topics = "yes"\n', "auto_create_topics must be true or false"),
        ("metadata = 5\n", "metadata must be a string"),
        ('inter_broker_secret = "short"\n', "inter_broker_secret must be 16 to"),
        ('[log]\n"flush.ms" = 9223372036854775808\n', "flush.ms must be an integer from 1 to"),
        ('[log]\n"segment.ms" = "\u0661\u0662"\n', "segment.ms must be an integer from 1 to"),
    ],
)
def test_a_bad_broker_setting_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_file(path)


def test_good_settings_still_load(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('port = 0\nnode_id = 3\n[log]\n"retention.ms" = -1\n"flush.ms" = "250"\n')
    config = BrokerConfig.from_file(path)
    assert config.node_id == 3
    assert config.log.retention_ms is None
    assert config.log.flush_ms == 250
    assert (
        LogConfig().with_overrides({"min.cleanable.dirty.ratio": "0.25"}).min_cleanable_dirty_ratio
        == 0.25
    )


def test_the_secret_is_not_in_the_config_repr() -> None:
    assert "s3cr3t" not in repr(BrokerConfig(inter_broker_secret="s3cr3t-s3cr3t-s3cr3t"))


def test_the_queue_configs_know_the_internal_topics() -> None:
    assert INTERNAL_TOPIC_NAMES == INTERNAL_TOPICS

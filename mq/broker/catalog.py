"""Topic configs: which keys a topic may set, and the log settings they make.

Topic configs are stored (in the metadata store, with the topic) as the
Kafka-style strings the user gave (``retention.ms`` …) and turned into a
:class:`~mq.storage.config.LogConfig` over the broker's defaults when a
replica opens; ``min.insync.replicas`` and ``unclean.leader.election.enable``
belong to replication, and the ``queue.*`` keys to share groups
(:mod:`mq.queues.config`), not the log.

Versions before the metadata store kept topics in ``<data>/topics.json``;
:class:`LegacyCatalog` reads that once so a single node adopts its topics.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mq.config_values import parse_int
from mq.errors import InvalidConfigError
from mq.queues.config import QUEUE_CONFIG_KEYS, share_config
from mq.storage.config import LogConfig
from mq.wire.limits import MAX_BROKERS

FILE_NAME = "topics.json"
FORMAT_VERSION = 1

TOPIC_CONFIG_KEYS = {
    "segment.bytes",
    "segment.ms",
    "retention.ms",
    "retention.bytes",
    "index.interval.bytes",
    "flush",
    "flush.ms",
    "max.message.bytes",
    "max.decompression.factor",
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "delete.retention.ms",
    "message.timestamp.after.max.ms",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    *QUEUE_CONFIG_KEYS,
}
"""Settings a topic may override (everything else is the broker's)."""


OFFSETS_TOPIC = "__consumer_offsets"
"""The internal topic of committed offsets (see :mod:`mq.broker.offsets`)."""
SHARE_STATE_TOPIC = "__share_state"
"""The internal topic of share groups' state (see :mod:`mq.broker.share_store`)."""
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, SHARE_STATE_TOPIC})

REPLICATION_CONFIG_KEYS = {"min.insync.replicas", "unclean.leader.election.enable"}
"""Topic configs of the cluster rather than the log."""


@dataclass
class TopicInfo:
    """A topic as the catalog file of earlier versions kept it."""

    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    internal: bool = False


def split_topic_configs(configs: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(log configs, replication configs) of a topic (queue configs are in neither)."""
    log_part = {
        k: v
        for k, v in configs.items()
        if k not in REPLICATION_CONFIG_KEYS and k not in QUEUE_CONFIG_KEYS
    }
    return log_part, {k: v for k, v in configs.items() if k in REPLICATION_CONFIG_KEYS}


def topic_log_config(defaults: LogConfig, configs: dict[str, str]) -> LogConfig:
    """The log settings of a topic: ``configs`` over the broker's defaults (all checked)."""
    overrides: dict[str, Any] = {}
    share_config(configs)
    for key, value in configs.items():
        if key in QUEUE_CONFIG_KEYS:
            continue
        if key not in TOPIC_CONFIG_KEYS:
            raise InvalidConfigError(f"unknown topic config {key!r}")
        if key == "min.insync.replicas":
            parse_int(key, value, 1, MAX_BROKERS)
            continue
        if key == "unclean.leader.election.enable":
            if value not in ("true", "false"):
                raise InvalidConfigError(f"{key} must be true or false, got {value!r}")
            continue
        if key in ("retention.ms", "retention.bytes") and value in ("-1", ""):
            overrides[key] = None
            continue
        overrides[key] = value
    return defaults.with_overrides(overrides)


class LegacyCatalog:
    """The ``topics.json`` of versions before the metadata store, read once to adopt it."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / FILE_NAME

    def load(self) -> list[TopicInfo]:
        if not self._path.exists():
            return []
        raw = json.loads(self._path.read_text())
        if raw.get("version") != FORMAT_VERSION:
            raise InvalidConfigError(f"{self._path}: unknown catalog version {raw.get('version')}")
        return [TopicInfo(**t) for t in raw["topics"]]

    def retire(self) -> None:
        """Keep the file, renamed, once its topics are in the store."""
        if self._path.exists():
            self._path.rename(self._path.with_name(FILE_NAME + ".adopted"))

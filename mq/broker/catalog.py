"""The topic catalog of a single node: names, partition counts and configs.

Kept in ``<data>/topics.json`` and replaced atomically on every change (write,
fsync, rename, fsync the directory), so a crash leaves the old or the new
catalog. Topic configs are stored as the Kafka-style strings the user gave
(``retention.ms`` …) and turned into a :class:`~mq.storage.config.LogConfig`
over the broker's defaults when a partition opens.

This is the embedded default's metadata; the replicated cluster keeps the same
facts in etcd behind the metadata-store interface.

Thread safety: one event loop.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mq.errors import InvalidConfigError
from mq.storage.config import LogConfig
from mq.storage.fileio import DEFAULT_IO, FileIO

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
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "delete.retention.ms",
}
"""Settings a topic may override (everything else is the broker's)."""


@dataclass
class TopicInfo:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    internal: bool = False

    def log_config(self, defaults: LogConfig) -> LogConfig:
        return topic_log_config(defaults, self.configs)


def topic_log_config(defaults: LogConfig, configs: dict[str, str]) -> LogConfig:
    """The log settings of a topic: ``configs`` over the broker's defaults (checked)."""
    overrides: dict[str, Any] = {}
    for key, value in configs.items():
        if key not in TOPIC_CONFIG_KEYS:
            raise InvalidConfigError(f"unknown topic config {key!r}")
        if key in ("retention.ms", "retention.bytes") and value in ("-1", ""):
            overrides[key] = None
            continue
        overrides[key] = value
    return defaults.with_overrides(overrides)


class Catalog:
    """Every topic of the node, persisted in one small JSON file."""

    def __init__(self, data_dir: Path, io: FileIO = DEFAULT_IO) -> None:
        self._path = data_dir / FILE_NAME
        self._io = io
        self.topics: dict[str, TopicInfo] = {}

    def load(self) -> None:
        if not self._path.exists():
            return
        raw = json.loads(self._path.read_text())
        if raw.get("version") != FORMAT_VERSION:
            raise InvalidConfigError(f"{self._path}: unknown catalog version {raw.get('version')}")
        self.topics = {t["name"]: TopicInfo(**t) for t in raw["topics"]}

    def save(self) -> None:
        body = {
            "version": FORMAT_VERSION,
            "topics": [vars(t) for t in sorted(self.topics.values(), key=lambda t: t.name)],
        }
        self._io.write_file_atomic(self._path, json.dumps(body, indent=1).encode())

    def __contains__(self, name: object) -> bool:
        return name in self.topics

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

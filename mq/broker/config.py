"""Broker settings: defaults for the embedded single node, a file, and flags.

``mq serve`` with no arguments runs with :class:`BrokerConfig`'s defaults; a
``--config FILE`` (TOML) overrides them, and command-line flags override the
file. Topic defaults (``log.*`` keys in the file, Kafka-style names) become the
:class:`~mq.storage.config.LogConfig` every topic starts from.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from mq.config_values import parse_int
from mq.errors import InvalidConfigError
from mq.storage.config import MAX_DURATION_MS, MAX_LOG_BYTES, LogConfig
from mq.wire.apis_replication import MAX_SECRET_BYTES, MIN_SECRET_BYTES
from mq.wire.limits import I32_MAX, I64_MAX, I64_MIN, MAX_BROKERS, MAX_PARTITIONS

DEFAULT_PORT = 9292
"""mq's fixed default port (Kafka's 9092 with a 2 for the second of its kind)."""
MiB = 1 << 20


@dataclass(frozen=True)
class BrokerConfig:
    data_dir: Path = Path("mq-data")
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    node_id: int = 0
    max_frame_bytes: int = 100 * MiB
    """Largest request accepted (Kafka's socket.request.max.bytes)."""
    max_inflight_requests: int = 64
    """Requests a connection may have in progress before the broker stops reading it."""
    auto_create_topics: bool = True
    """Create a topic on first produce or metadata request, as Kafka does by default."""
    default_partitions: int = 1
    offsets_partitions: int = 10
    """Partitions of ``__consumer_offsets`` (fixed once the topic exists)."""
    share_state_partitions: int = 10
    """Partitions of ``__share_state``, where share groups keep their state (fixed once
    the topic exists; replicated like ``__consumer_offsets``)."""
    retention_check_ms: int = 60_000
    """How often retention runs over every partition."""
    share_state_load_wait_ms: int = 10_000
    """How long a share-state load waits for the state partition's high watermark to
    reach its fence (a leader just elected or restarted: its followers' next fetch),
    before the receive fails with a retriable COORDINATOR_LOAD_IN_PROGRESS."""
    high_watermark_checkpoint_ms: int = 5_000
    """How often each partition's high watermark is checkpointed (Kafka's
    replica.high.watermark.checkpoint.interval.ms): a restarted replica starts from it."""
    cleaner_backoff_ms: int = 15_000
    """How often the log cleaner looks for compacted partitions to clean (Kafka's
    log.cleaner.backoff.ms)."""
    metadata: str | None = None
    """Where the cluster's metadata lives: ``etcd://HOST:PORT``, or None for the embedded
    local store (``<data>/metadata.json``: a single node, no external service)."""
    session_timeout_ms: int = 6_000
    """Time to live of the broker's registration lease: a broker silent this long is
    dead to the controller (Kafka's broker.session.timeout.ms)."""
    default_replication_factor: int = 1
    """Replicas of a topic created without a replication factor (capped by the live
    brokers for auto-created and internal topics)."""
    offsets_replication_factor: int = 3
    """Replicas of ``__consumer_offsets`` (capped by the brokers alive when it is created)."""
    min_insync_replicas: int = 1
    """Default of the topic config ``min.insync.replicas`` (what acks=all requires)."""
    replica_lag_time_max_ms: int = 10_000
    """A follower that has not caught up for this long leaves the ISR."""
    replica_fetch_wait_max_ms: int = 500
    """How long a follower's fetch waits at the leader for new data."""
    replica_fetch_max_bytes: int = 4 * MiB
    """Bytes per replica fetch response (and per partition in it)."""
    replication_catchup_bytes_per_s: int = 64 * MiB
    """Bulkhead: the rate at which a leader serves followers outside the ISR (catching up),
    so that a returning replica does not starve producers and consumers."""
    scrub_bytes_per_sec: int = 16 * MiB
    """Rate at which the scrubber re-reads sealed segments to find bit rot
    (:mod:`mq.broker.scrubber`); 0 turns it off. 16 MiB/s is a few per cent of one
    disk's sequential bandwidth and of one core's CRC-32C speed, so the scrub never
    competes with produce and fetch, and still goes over 50 GiB in under an hour."""
    scrub_interval_ms: int = 3_600_000
    """Pause between two scrub passes over every sealed segment (a pass itself takes
    the data's size over :attr:`scrub_bytes_per_sec`). A read that meets a damaged
    batch has its partition scrubbed at once, whatever this says."""
    malloc_trim_bytes: int = 512 * MiB
    """Freed memory glibc keeps for reuse instead of handing it back to the kernel
    (:func:`mq.allocator.keep_freed_memory`); 0 leaves malloc's defaults alone."""
    inter_broker_secret: str | None = field(default=None, repr=False)
    """The secret brokers of the cluster show each other (``broker_hello``) to be served
    the broker-only APIs (:mod:`mq.replication.hello`): the same on every broker, at
    least 16 bytes. None (the default): a random one, made by the cluster's first
    broker and kept in the metadata store. Never logged."""
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        _check_values(self)  # types and ranges first (issue 18, F10): clear errors, no traceback
        if not 0 <= self.port <= 65_535:
            raise InvalidConfigError(f"port must be 0..65535, got {self.port}")
        if self.max_inflight_requests < 1 or self.default_partitions < 1:
            raise InvalidConfigError("max_inflight_requests and default_partitions must be >= 1")
        if self.scrub_bytes_per_sec < 0:
            raise InvalidConfigError(
                f"scrub_bytes_per_sec must be >= 0 (0: off), got {self.scrub_bytes_per_sec}"
            )
        if self.malloc_trim_bytes < 0:
            raise InvalidConfigError(
                f"malloc_trim_bytes must be >= 0, got {self.malloc_trim_bytes}"
            )
        if not 0 <= self.node_id < 1 << 31:
            raise InvalidConfigError(f"node_id must be a non-negative int32, got {self.node_id}")
        positive = (
            "session_timeout_ms",
            "default_replication_factor",
            "offsets_replication_factor",
            "share_state_partitions",
            "min_insync_replicas",
            "replica_lag_time_max_ms",
            "replica_fetch_max_bytes",
            "replication_catchup_bytes_per_s",
            "scrub_interval_ms",
            "high_watermark_checkpoint_ms",
            "share_state_load_wait_ms",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        secret = self.inter_broker_secret
        if secret is not None and not MIN_SECRET_BYTES <= len(secret.encode()) <= MAX_SECRET_BYTES:
            raise InvalidConfigError(
                f"inter_broker_secret must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes long"
            )
        if self.metadata is not None and not self.metadata.startswith("etcd://"):
            raise InvalidConfigError(f"metadata must be etcd://HOST:PORT, got {self.metadata!r}")

    @classmethod
    def from_file(cls, path: Path, **overrides: Any) -> BrokerConfig:
        """Read a TOML file (top-level broker keys, a ``[log]`` table of topic defaults)."""
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidConfigError(f"{path}: {exc}") from exc
        log_settings = raw.pop("log", {})
        known = {f.name for f in fields(cls)} - {"log"}
        unknown = set(raw) - known
        if unknown:
            raise InvalidConfigError(f"{path}: unknown settings {sorted(unknown)}")
        if "data_dir" in raw:
            raw["data_dir"] = Path(raw["data_dir"])
        config = cls(**raw, log=LogConfig().with_overrides(log_settings))
        return config.with_overrides(**overrides)

    def with_overrides(self, **overrides: Any) -> BrokerConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


INT_RANGES: dict[str, tuple[int, int]] = {
    "port": (0, 65_535),
    "node_id": (0, I32_MAX),
    "max_frame_bytes": (64 * 1024, I32_MAX),
    "max_inflight_requests": (1, 1 << 16),
    "default_partitions": (1, MAX_PARTITIONS),
    "offsets_partitions": (1, MAX_PARTITIONS),
    "share_state_partitions": (1, MAX_PARTITIONS),
    "default_replication_factor": (1, MAX_BROKERS),
    "offsets_replication_factor": (1, MAX_BROKERS),
    "min_insync_replicas": (1, MAX_BROKERS),
    "retention_check_ms": (1, MAX_DURATION_MS),
    "share_state_load_wait_ms": (1, MAX_DURATION_MS),
    "high_watermark_checkpoint_ms": (1, MAX_DURATION_MS),
    "cleaner_backoff_ms": (1, MAX_DURATION_MS),
    "session_timeout_ms": (1, MAX_DURATION_MS),
    "replica_lag_time_max_ms": (1, MAX_DURATION_MS),
    "replica_fetch_wait_max_ms": (0, MAX_DURATION_MS),
    "replica_fetch_max_bytes": (1, I32_MAX),
    "replication_catchup_bytes_per_s": (1, MAX_LOG_BYTES),
    "scrub_bytes_per_sec": (0, MAX_LOG_BYTES),
    "scrub_interval_ms": (1, MAX_DURATION_MS),
    "malloc_trim_bytes": (0, MAX_LOG_BYTES),
}
"""The range of every integer broker setting (inclusive); an integer setting not
listed is still checked to be an integer. Times use the topic configs' ceiling
(:data:`~mq.storage.config.MAX_DURATION_MS`), frame and fetch sizes int32 (Kafka's)."""


def _check_values(config: BrokerConfig) -> None:
    """INVALID_CONFIG naming the setting for a value of the wrong type (a string where
    the file should have a number, a bool for an int) or outside its range."""
    for spec in fields(config):
        value = getattr(config, spec.name)
        kind = str(spec.type)
        if kind == "int":
            low, high = INT_RANGES.get(spec.name, (I64_MIN, I64_MAX))
            parse_int(spec.name, value, low, high)
            if not isinstance(value, int):  # "12" in a TOML file: a string, not a number
                raise InvalidConfigError(f"{spec.name} must be a number, got {value!r}")
        elif kind == "bool" and not isinstance(value, bool):
            raise InvalidConfigError(f"{spec.name} must be true or false, got {value!r}")
        elif kind in ("str", "str | None") and not isinstance(value, (str, type(None))):
            raise InvalidConfigError(f"{spec.name} must be a string, got {value!r}")

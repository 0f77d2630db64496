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

from mq import interpreter
from mq.broker import http_security
from mq.broker import listeners as listener_specs
from mq.config_values import parse_int
from mq.errors import InvalidConfigError
from mq.storage.config import MAX_DURATION_MS, MAX_LOG_BYTES, LogConfig
from mq.storage.writer import THREAD_WRITE_BYTES
from mq.wire.apis_acls import MAX_ACL_BINDINGS
from mq.wire.apis_replication import MAX_SECRET_BYTES, MIN_SECRET_BYTES
from mq.wire.limits import I32_MAX, I64_MAX, I64_MIN, MAX_BROKERS, MAX_NAME_LEN, MAX_PARTITIONS

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
    max_pending_request_bytes: int = 64 * 1024
    """Bytes of complete requests a connection may have waiting while it cannot be served
    more (requests in flight at their bound, responses queued at theirs), before the
    broker stops reading it. Reading goes on until then so that a client which closes
    while its long polls are parked is noticed at once (its polls are cancelled)."""
    max_queued_response_bytes: int = 1 * MiB
    """Bytes of responses queued in a connection's socket buffer before the broker stops
    dispatching and reading that connection until its client reads (the transport's high
    water mark; it resumes below a quarter of it). What requests already in flight write
    may add to it, at most ``max_inflight_requests`` responses. 1 MiB on top of the
    kernel's socket buffers keeps a reading consumer's pipeline full, and 100 clients
    that never read hold 100 MiB at most before their stall timeout: inside the budget."""
    queued_max_bytes: int = 256 * MiB
    """One memory budget for all connections: request bytes buffered (a frame's declared
    length is reserved when its length prefix arrives, before it is buffered) and
    responses queued in sockets (Kafka's queued.max.request.bytes, with the responses).
    When it is spent, connections that would add more stop being read until it frees up.
    At least ``max_frame_bytes``, so that any legal frame can be admitted."""
    max_connections: int = 4_096
    """Connections open at once; more are closed as they are accepted (Kafka's
    max.connections). Each costs a file descriptor and its buffers."""
    max_connections_per_ip: int = 1_024
    """Connections open at once from one client address (Kafka's
    max.connections.per.ip): one host cannot take every connection."""
    connections_max_idle_ms: int = 600_000
    """A connection that neither sends a byte nor gets a response, with no request in
    progress, for this long is closed (Kafka's connections.max.idle.ms, 10 min)."""
    unfinished_frame_timeout_ms: int = 30_000
    """A frame begun and not finished within this long (while the broker reads the
    connection) closes the connection: its reserved bytes go back to the budget
    (Kafka's request.timeout.ms default)."""
    response_stall_timeout_ms: int = 60_000
    """A connection whose queued responses stay above its high water mark (its client
    does not read them) for this long is closed, and their memory freed."""
    close_linger_ms: int = 5_000
    """When a connection is closed for a malformed frame, how long the responses of the
    requests it sent before it are awaited (they are written first); then the rest are
    cancelled and the connection closed."""
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
    gc_full_collection_every: int = interpreter.FULL_COLLECTION_EVERY
    """Young-generation collections between two full ones, and the start-up heap frozen
    (:func:`mq.interpreter.settle`, applied by ``mq serve``): a full collection stops
    every client for as long as it walks the heap. 0 leaves Python's defaults alone."""
    gil_switch_interval_us: int = interpreter.SWITCH_INTERVAL_US
    """How long the codec thread may hold the GIL while the event loop waits for it
    (:mod:`mq.interpreter`; applied by ``mq serve``). 0 leaves Python's 5 ms."""
    thread_write_bytes: int = THREAD_WRITE_BYTES
    """Appends of this many bytes or more are copied into their segment in a worker
    thread, not on the event loop (:mod:`mq.storage.steps`): a megabyte's ``pwrite`` is a
    stall of milliseconds for every other client under load. 0: every append on the loop."""
    max_open_files: int = 1024
    """Active segments' descriptors kept open at once (an LRU, :mod:`mq.storage.handles`);
    capped at start by the fd budget, ``RLIMIT_NOFILE`` less :attr:`fd_reserve`. A
    partition whose file was closed reopens it on its next append (microseconds)."""
    fd_reserve: int = 512
    """Descriptors the storage budget leaves to everything else: client and broker
    connections, the metadata store's, the listening socket, log files, the
    interpreter's own (Kafka's advice: size ``ulimit -n`` for sockets *and* files)."""
    max_segment_maps: int = 16_384
    """Sealed segments' and index files' maps kept at once (an LRU); each costs one of
    the kernel's ``vm.max_map_count`` areas (65,530 by default), which every hosted
    partition's active segment also takes one of."""
    map_reserve: int = 2_048
    """``vm.max_map_count`` areas left to the interpreter, its libraries, thread stacks
    and the allocator's arenas (a broker uses a few hundred)."""
    max_partitions: int = 0
    """Most partition replicas this broker hosts; 0: as many as the map budget allows
    (``vm.max_map_count`` less :attr:`map_reserve` and :attr:`max_segment_maps`: one
    map per hosted partition). Topics past it are refused at creation with
    POLICY_VIOLATION, before any file is made (:mod:`mq.broker.limits`)."""
    group_max_size: int = 1_000
    """Members one consumer group may have (Kafka's ``group.max.size``, whose default is
    unbounded): GROUP_MAX_SIZE_REACHED past it. A member beyond a group's partition
    count gets nothing to consume, so a thousand covers a 1,000-partition topic with
    one consumer each; each join re-runs the assignor over every member, so the bound
    also caps that work (N joins cost at most N x 1,000 member visits)."""
    group_max_topics_per_member: int = 1_000
    """Topics one member may subscribe to (Kafka has no such bound; its metadata
    requests are bounded instead). A member keeps each name (~350 B measured per topic:
    100,000 names took 34.6 MB per join), so a member costs at most ~0.35 MB; a client
    with more topics than this subscribes by pattern to the ones that exist."""
    max_groups: int = 10_000
    """Consumer groups with members that this broker coordinates: a join that would
    start one more fails with GROUP_MAX_SIZE_REACHED (groups that only hold committed
    offsets do not count; an empty group's state is freed when its last member goes)."""
    max_group_subscriptions: int = 1_000_000
    """Subscription entries over every group this broker coordinates (one per member
    plus one per topic it subscribes to): GROUP_MAX_SIZE_REACHED past it. Measured
    ~120 B per entry with 30-character topic names (~350 B at the longest names), so
    members' subscriptions take ~120-350 MB at most, whatever ``max_groups`` times
    ``group_max_size`` times ``group_max_topics_per_member`` would allow."""
    max_share_sessions: int = 2_000
    """Share partitions (share group x partition) this broker keeps loaded (Kafka's
    ``group.share.max.share.sessions`` default): past it, the least recently used idle
    one is saved-and-evicted, or the receive fails with a retriable
    SHARE_SESSION_LIMIT_REACHED if none is idle. Each holds a window of at most
    ``MAX_WINDOW`` records, so this bounds the memory share groups can take."""
    max_share_groups_per_partition: int = 100
    """Share groups loaded at once on one partition: one topic named by many group ids
    cannot take every share session of the broker (Kafka bounds share groups per
    cluster, ``group.share.max.groups``, at 10)."""
    share_session_idle_ms: int = 300_000
    """A share partition with no receive or settle for this long, whose state is saved
    and which nobody waits on, is dropped from memory; its next receive reloads it
    from ``__share_state`` (nothing acknowledged is lost: only saved state is evicted).
    At least 1 s whatever the setting (``share_sessions.PRESSURE_MIN_IDLE_S``): a
    receive holds its sessions without marking them for milliseconds at a time."""
    share_fence_entries: int = 10_000
    """Share partitions whose admitted epoch a state-partition leader remembers beyond
    what its metadata view already says (:class:`mq.broker.share_store.ShareStateStore`):
    entries the view covers are dropped, and past this many the oldest go first."""
    producer_id_expiration_ms: int = 86_400_000
    """An idempotent producer whose newest batch on a partition is older than this is
    forgotten there (Kafka's ``producer.id.expiration.ms``, 1 day); a retry after that
    gets UNKNOWN_PRODUCER_ID. Applied at open too, so a restart agrees with a pass."""
    producer_id_expiration_check_ms: int = 600_000
    """How often expired producer ids are removed (Kafka's
    ``producer.id.expiration.check.interval.ms``, 10 minutes)."""
    max_producer_ids_per_partition: int = 10_000
    """Idempotent producers one partition remembers (~1 KB each with their cached
    batches): past it the least recently written one is forgotten (as if expired). A
    partition seldom has more than a few hundred producers; Kafka has no such bound
    but rate-limits new producer ids (KIP-936)."""
    # -- quotas and fair sharing (issue 20) --
    quota_burst_ms: int = 1_000
    """How much of its quota a client may use at once after being idle (its bucket's
    depth in time; Kafka's one-second quota window)."""
    quota_max_throttle_ms: int = 10_000
    """The longest a throttled client is told to wait (and left unread) at once: well
    under the clients' 30 s request timeout, so a pipelined request never times out
    behind a throttle (Kafka caps its throttle at the quota window too)."""
    max_connection_creation_rate: int = 0
    """New connections per second accepted from one client address (Kafka's
    ``max.connection.creation.rate``); past it a connection is accepted but not read
    until the address is back under the rate (closed if that is more than
    ``quota_max_throttle_ms`` away). 0: no limit."""
    fair_quantum_bytes: int = 64 * 1024
    """Deficit round robin over principals: the request bytes one principal's
    connections may start per round before the next principal's turn."""
    max_inflight_per_principal: int = 1_024
    """Bulkhead: requests in progress at once for one principal over all its
    connections; past it, its connections wait (others' requests do not)."""
    inter_broker_secret: str | None = field(default=None, repr=False)
    """The secret brokers of the cluster show each other (``broker_hello``) to be served
    the broker-only APIs (:mod:`mq.replication.hello`): the same on every broker, at
    least 16 bytes. None (the default): a random one, made by the cluster's first
    broker and kept in the metadata store. Never logged."""
    # -- authorization (issue 19, ACLs: mq.broker.authorizer) --------------------------
    authorizer: str = "auto"
    """"acl": every request is checked against the ACLs (anything not allowed is
    denied, to ``User:ANONYMOUS`` too); "none": everything is allowed; "auto" (the
    default): "acl" as soon as a listener authenticates, else "none", so that the
    zero-config ``mq serve`` allows everything."""
    super_users: tuple[str, ...] = ()
    """Principals the ACLs do not apply to (``User:admin``; a bare name means
    ``User:name``): Kafka's ``super.users``."""
    max_acls: int = 100_000
    """ACL bindings the cluster may hold: every broker keeps them all in memory
    (~1 KB each with the index), so 100,000 cost ~100 MB; create_acls past it fails.
    At most 100,000 (``MAX_ACL_BINDINGS``): describe_acls answers them all at once."""
    # encryption at rest (issue 19: mq.records.encryption, mq.storage.keyfile)
    encryption_key_file: Path | None = None
    """A key file (``mq storage keygen FILE`` makes one): record batches are encrypted
    with its newest key before they reach the disk, and every key in it decrypts. The
    same file on every broker; SIGHUP reloads it. None (the default): nothing is
    encrypted."""
    allow_plaintext_storage: bool = False
    """Start without ``encryption_key_file`` although the cluster's data is encrypted
    at rest (a broker with a key file once ran on its metadata store): new batches are
    then stored in clear. Off by default, so that a forgotten flag refuses to start
    instead of silently writing plaintext (:mod:`mq.broker.encryption_guard`)."""
    # monitoring (issue 21): the HTTP listener, metrics, audit, logs
    http_port: int | None = None
    """Port of the broker's HTTP listener (``/metrics``, ``/healthz``, ``/readyz``, the
    console), on the same host as the main listener; 0 picks a free one. None (the
    default): no HTTP listener, and no metrics are counted (the quick start opens one
    port only)."""
    log_format: str = "text"
    """``text`` (one human-readable line per record) or ``json`` (one JSON object per
    line with stable fields: time, level, logger, broker, topic, partition, message;
    :mod:`mq.logs`)."""
    audit_max_bytes: int = 64 * MiB
    """The audit log (``<data_dir>/audit/audit.log``, :mod:`mq.broker.audit`) rotates
    past this size; with :attr:`audit_max_files` it bounds the disk the audit takes
    (5 x 64 MiB: ~1 million admin operations of a few hundred bytes)."""
    audit_max_files: int = 4
    """Rotated audit files kept (``audit.log.1`` .. ``audit.log.N``) besides the current one."""
    metrics_max_labelled: int = 1_000
    """Label sets one metric family exports at most (topics, partitions, groups, queues,
    principals and client ids): past it a counter folds new ones into ``__other__`` and a
    scrape-time gauge leaves them out, both counted (``mq_metrics_label_overflow_total``,
    ``mq_metrics_series_dropped``). 1,000 partitions x ~10 families is ~10,000 series, a
    scrape of ~1 MB: what one Prometheus target should stay under."""
    # -- identity (issue 19): listeners, TLS, SASL, inter-broker authentication ----------
    listeners: tuple[str, ...] = ()
    """``SCHEME://HOST:PORT`` each (:mod:`mq.broker.listeners`); empty: the embedded
    default, one plaintext listener on ``host``:``port`` with no authentication."""
    insecure: bool = False
    """Listen on a non-loopback address without TLS and authentication anyway."""
    tls_cert: str | None = None
    """The broker's certificate chain (PEM), for its ``ssl`` and ``sasl_ssl`` listeners."""
    tls_key: str | None = field(default=None, repr=False)
    """The private key of :attr:`tls_cert` (PEM)."""
    tls_client_ca: str | None = None
    """CA certificates (PEM) that client certificates must chain to: set, the TLS
    listeners require a client certificate (mutual TLS) and an ``ssl`` listener's
    principal is mapped from its subject (:attr:`ssl_principal_mapping_rules`)."""
    tls_trust_ca: str | None = None
    """CA certificates (PEM) a broker trusts when it connects to another over TLS
    (default: :attr:`tls_client_ca`)."""
    ssl_principal_mapping_rules: tuple[str, ...] = ("DEFAULT",)
    """Kafka's ``ssl.principal.mapping.rules`` (:mod:`mq.broker.principals`): the first
    ``RULE:pattern/replacement/[L|U]`` whose pattern matches the whole subject
    (RFC 2253, ``CN=alice,O=Acme``) names the user; ``DEFAULT``: the subject's CN."""
    sasl_failed_authentication_delay_ms: int = 500
    """A failed SASL login is answered after this delay (Kafka's
    ``connection.failed.authentication.delay.ms``): guessing passwords gets slow."""
    sasl_authenticate_timeout_ms: int = 10_000
    """A connection to a SASL listener that has not authenticated within this long
    is closed (a handshake never finished holds nothing for longer)."""
    inter_broker_listener: str | None = None
    """The name of the listener (``SASL_SSL``...) brokers connect to each other
    through; None: the first listener."""
    inter_broker_sasl_mechanism: str = "SCRAM-SHA-512"
    inter_broker_sasl_username: str | None = None
    inter_broker_sasl_password: str | None = field(default=None, repr=False)
    """The broker's own SASL credentials on a SASL inter-broker listener. Never logged."""
    # -- HTTP listener authentication (issues 19/21: mq.broker.http_security, mq.http.auth) --
    http_tls: str = "auto"
    """TLS on the HTTP listener: ``auto`` (the default) when it authenticates (HTTP Basic:
    the password travels in every request) and its host is not loopback; ``on`` always;
    ``off`` never (refused where ``auto`` would use TLS, unless ``insecure``). It uses
    :attr:`tls_cert` and :attr:`tls_key`."""
    http_auth_cache_entries: int = 1_024
    """Successful HTTP Basic logins remembered (a keyed hash of the credentials, never the
    password), so that a console polling every 2 s does not cost a PBKDF2 (~5-20 ms of
    CPU) per request; past it the least recently used is forgotten. 1,024 x ~200 bytes."""
    http_auth_cache_ttl_ms: int = 60_000
    """How long a remembered HTTP login is trusted without deriving the password again
    (a changed or deleted user is forgotten at once, whatever this says)."""
    http_auth_failures_per_ip: int = 10
    """Failed HTTP logins one client address may make per
    :attr:`http_auth_failure_window_ms`; past it the address is answered 429 without
    checking anything until the window ends: guessing passwords stays slow, and one
    client cannot spend the broker's CPU on PBKDF2."""
    http_auth_failure_window_ms: int = 60_000
    """The window of :attr:`http_auth_failures_per_ip`."""
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        _check_values(self)  # types and ranges first (issue 18, F10): clear errors, no traceback
        check_authorization(self)
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
            "max_open_files",
            "max_segment_maps",
            "group_max_size",
            "group_max_topics_per_member",
            "max_groups",
            "max_group_subscriptions",
            "max_share_sessions",
            "max_share_groups_per_partition",
            "share_session_idle_ms",
            "share_fence_entries",
            "producer_id_expiration_ms",
            "producer_id_expiration_check_ms",
            "max_producer_ids_per_partition",
            "max_pending_request_bytes",
            "max_queued_response_bytes",
            "max_connections",
            "max_connections_per_ip",
            "connections_max_idle_ms",
            "unfinished_frame_timeout_ms",
            "response_stall_timeout_ms",
            "close_linger_ms",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("fd_reserve", "map_reserve", "max_partitions"):
            if getattr(self, name) < 0:
                raise InvalidConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.queued_max_bytes < self.max_frame_bytes:
            raise InvalidConfigError(
                f"queued_max_bytes ({self.queued_max_bytes}) must be at least max_frame_bytes "
                f"({self.max_frame_bytes}): a frame of the largest legal size must fit"
            )
        secret = self.inter_broker_secret
        if secret is not None and not MIN_SECRET_BYTES <= len(secret.encode()) <= MAX_SECRET_BYTES:
            raise InvalidConfigError(
                f"inter_broker_secret must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes long"
            )
        if self.http_port is not None and (
            isinstance(self.http_port, bool)
            or not isinstance(self.http_port, int)
            or not 0 <= self.http_port <= 65_535
        ):
            raise InvalidConfigError(f"http_port must be 0..65535, got {self.http_port!r}")
        if self.log_format not in ("text", "json"):
            raise InvalidConfigError(f"log_format must be text or json, got {self.log_format!r}")
        for name in ("listeners", "ssl_principal_mapping_rules"):  # TOML gives lists
            values = getattr(self, name)
            if isinstance(values, str) or not all(isinstance(v, str) for v in values):
                raise InvalidConfigError(f"{name} must be a list of strings, got {values!r}")
            object.__setattr__(self, name, tuple(values))
        listener_specs.check(self)
        http_security.check(self)
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
        if isinstance(raw.get("encryption_key_file"), str):
            raw["encryption_key_file"] = Path(raw["encryption_key_file"])
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
    "gc_full_collection_every": (0, 1_000_000),
    "gil_switch_interval_us": (0, 1_000_000),
    "thread_write_bytes": (0, I32_MAX),
    # connections (issue 18)
    "max_pending_request_bytes": (1, I32_MAX),
    "max_queued_response_bytes": (1, I32_MAX),
    "queued_max_bytes": (1, MAX_LOG_BYTES),
    "max_connections": (1, 1 << 24),
    "max_connections_per_ip": (1, 1 << 24),
    "connections_max_idle_ms": (1, MAX_DURATION_MS),
    "unfinished_frame_timeout_ms": (1, MAX_DURATION_MS),
    "response_stall_timeout_ms": (1, MAX_DURATION_MS),
    "close_linger_ms": (1, MAX_DURATION_MS),
    # quotas and fair sharing (issue 20)
    "quota_burst_ms": (1, MAX_DURATION_MS),
    "quota_max_throttle_ms": (1, MAX_DURATION_MS),
    "max_connection_creation_rate": (0, 1 << 24),
    "fair_quantum_bytes": (1, I32_MAX),
    "max_inflight_per_principal": (1, 1 << 24),
    # identity (issue 19)
    "sasl_failed_authentication_delay_ms": (0, 10_000),
    "sasl_authenticate_timeout_ms": (100, 600_000),
    "http_auth_cache_entries": (1, 1 << 20),
    "http_auth_cache_ttl_ms": (0, 86_400_000),
    "http_auth_failures_per_ip": (1, 1 << 20),
    "http_auth_failure_window_ms": (1_000, 86_400_000),
    # files
    "max_open_files": (1, 1 << 24),
    "fd_reserve": (0, 1 << 24),
    "max_segment_maps": (1, I32_MAX),
    "map_reserve": (0, I32_MAX),
    "max_partitions": (0, I32_MAX),
    "metrics_max_labelled": (1, 1_000_000),
    "audit_max_bytes": (1024, MAX_LOG_BYTES),
    "audit_max_files": (1, 1_000),
    # state
    "group_max_size": (1, I32_MAX),
    "group_max_topics_per_member": (1, I32_MAX),
    "max_groups": (1, I32_MAX),
    "max_group_subscriptions": (1, I32_MAX),
    "max_share_sessions": (1, I32_MAX),
    "max_share_groups_per_partition": (1, I32_MAX),
    "share_session_idle_ms": (1, MAX_DURATION_MS),
    "share_fence_entries": (1, I32_MAX),
    "producer_id_expiration_ms": (1, MAX_DURATION_MS),
    "producer_id_expiration_check_ms": (1, MAX_DURATION_MS),
    "max_producer_ids_per_partition": (1, I32_MAX),
    "max_acls": (1, MAX_ACL_BINDINGS),
}
"""The range of every integer broker setting (inclusive); an integer setting not
listed is still checked to be an integer. Times use the topic configs' ceiling
(:data:`~mq.storage.config.MAX_DURATION_MS`), frame and fetch sizes int32 (Kafka's)."""


AUTHORIZERS = ("auto", "acl", "none")


def check_authorization(config: BrokerConfig) -> None:
    """INVALID_CONFIG for an unknown authorizer or a super user that is not a name;
    super users are kept as principals (``alice`` -> ``User:alice``), as a tuple."""
    if config.authorizer not in AUTHORIZERS:
        raise InvalidConfigError(
            f"authorizer must be one of {AUTHORIZERS}, got {config.authorizer!r}"
        )
    users: object = config.super_users
    if isinstance(users, str) or not isinstance(users, (list, tuple)):
        raise InvalidConfigError(f"super_users must be a list of names, got {users!r}")
    principals = []
    for user in users:
        if not isinstance(user, str) or not user.strip(":") or len(user) > MAX_NAME_LEN:
            raise InvalidConfigError(f"super_users: {user!r} is not a user name")
        principals.append(user if ":" in user else f"User:{user}")
    object.__setattr__(config, "super_users", tuple(principals))


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

"""A deterministic web-traffic simulator, and the producer that ships its lines to mq.

:func:`generate_events` is pure: the same :class:`TrafficConfig` (seed
included) gives the same events, so a test can compute the expected result
from the very lines it produced. Traffic goes to a few endpoints with their
own mix of client errors (4xx), server errors (5xx), latencies and response
sizes; an optional incident makes one endpoint fail often for a while, so
that the aggregated error rates have something to show.

Event times advance at ``per_second`` events per simulated second, and each
event is logged up to ``max_lateness`` earlier than its place in the stream,
as lines from many servers arrive slightly out of order. The lateness must
stay below the job's watermark delay: then no event is ever behind the
watermark, nothing is dropped as late, and the Spark output equals the
reference aggregation exactly.

:func:`produce` sends the lines (keyed by client ip or by path), optionally
at a fixed rate for a "live" demo.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from mq.client.sync import SyncProducer
from spark_connector.pipeline.events import AccessEvent, format_line


@dataclass(frozen=True)
class Endpoint:
    """One path of the simulated site and how it behaves."""

    path: str
    weight: int
    """Relative share of the traffic."""
    methods: tuple[str, ...]
    client_error_rate: float
    server_error_rate: float
    latency_ms: int
    """Median response time of a success."""
    size: tuple[int, int]
    """Response body size range (bytes) of a success."""
    queries: tuple[str, ...] = ()
    """Query strings some requests carry (the aggregation ignores them)."""
    not_modified_rate: float = 0.0
    """Share of 304 responses (no body: ``-`` in the bytes field)."""


ENDPOINTS: Final = (
    Endpoint("/", 18, ("GET",), 0.01, 0.001, 12, (8_000, 12_000)),
    Endpoint("/static/app.js", 20, ("GET",), 0.002, 0.0, 3, (180_000, 180_000), (), 0.6),
    Endpoint("/api/search", 16, ("GET",), 0.02, 0.005, 45, (1_000, 20_000), ("q=shoes", "q=hat")),
    Endpoint("/api/orders", 14, ("GET", "POST"), 0.03, 0.01, 30, (300, 4_000)),
    Endpoint("/api/cart", 10, ("GET", "POST", "DELETE"), 0.05, 0.01, 25, (200, 2_000)),
    Endpoint("/api/checkout", 5, ("POST",), 0.04, 0.03, 120, (400, 900)),
    Endpoint("/login", 8, ("POST",), 0.15, 0.002, 60, (150, 300)),
    Endpoint("/healthz", 9, ("GET",), 0.0, 0.0, 1, (2, 2)),
)
CLIENT_ERRORS: Final = (400, 401, 403, 404, 404, 404, 429)
SERVER_ERRORS: Final = (500, 500, 502, 503, 504)
USER_AGENTS: Final = (
    "Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/131.0",
    "curl/8.5.0",
    "kube-probe/1.31",
)
DEFAULT_START: Final = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


@dataclass(frozen=True)
class TrafficConfig:
    seed: int = 1
    events: int = 10_000
    start: datetime = DEFAULT_START
    per_second: float = 20.0
    """Events per simulated second: the event times span ``events / per_second`` seconds."""
    max_lateness: timedelta = timedelta(seconds=30)
    """How much earlier than its place in the stream an event may be logged. Events are
    then at most this (plus the second the log format truncates) behind the latest one:
    keep it below the job's watermark delay, or Spark drops late events."""
    clients: int = 250
    incident: tuple[timedelta, timedelta] | None = (timedelta(minutes=5), timedelta(minutes=8))
    """From/to (after ``start``): /api/checkout fails more, as in an outage."""
    incident_error_rate: float = 0.5
    """The share of 5xx responses of /api/checkout during the incident."""

    def __post_init__(self) -> None:
        if self.events < 0 or self.per_second <= 0 or self.clients <= 0:
            raise ValueError("events >= 0, per_second > 0 and clients > 0")
        if self.start.tzinfo is None:
            raise ValueError("the start time needs a timezone")
        if self.max_lateness < timedelta(0):
            raise ValueError("max_lateness cannot be negative")


def generate_events(config: TrafficConfig) -> Iterator[AccessEvent]:
    """``config.events`` access-log events, the same ones for the same config."""
    rng = random.Random(config.seed)
    ips = [
        f"10.{rng.randrange(8)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        for _ in range(config.clients)
    ]
    # a few clients make most requests, as on a real site
    ip_weights = [1.0 / (rank + 1) for rank in range(config.clients)]
    weights = [e.weight for e in ENDPOINTS]
    lateness_s = config.max_lateness.total_seconds()
    for i in range(config.events):
        offset = timedelta(seconds=i / config.per_second - rng.uniform(0, lateness_s))
        endpoint = rng.choices(ENDPOINTS, weights)[0]
        yield _request(rng, endpoint, config, offset, rng.choices(ips, ip_weights)[0])


def _request(
    rng: random.Random, endpoint: Endpoint, config: TrafficConfig, offset: timedelta, ip: str
) -> AccessEvent:
    server_error_rate = endpoint.server_error_rate
    if (
        config.incident is not None
        and endpoint.path == "/api/checkout"
        and config.incident[0] <= offset < config.incident[1]
    ):
        server_error_rate = config.incident_error_rate
    method = rng.choice(endpoint.methods)
    draw = rng.random()
    latency = endpoint.latency_ms * rng.lognormvariate(0, 0.5)
    size: int | None = rng.randint(*endpoint.size)
    if draw < server_error_rate:
        status = rng.choice(SERVER_ERRORS)
        size = rng.randint(150, 600)
        latency = 30_000 + rng.uniform(0, 50) if status == 504 else latency * 3
    elif draw < server_error_rate + endpoint.client_error_rate:
        status = rng.choice(CLIENT_ERRORS)
        size = rng.randint(100, 400)
        latency /= 4
    elif draw < server_error_rate + endpoint.client_error_rate + endpoint.not_modified_rate:
        status, size, latency = 304, None, latency / 2
    else:
        status = 201 if method == "POST" and endpoint.path != "/login" else 200
    return AccessEvent(
        ip=ip,
        time=config.start + timedelta(seconds=int(offset.total_seconds() // 1)),
        method=method,
        path=endpoint.path,
        status=status,
        bytes=size,
        latency_ms=max(1, round(latency)),
        referer=rng.choice(("-", "-", "https://shop.example/")),
        user_agent=(
            "kube-probe/1.31" if endpoint.path == "/healthz" else rng.choice(USER_AGENTS[:4])
        ),
        query=rng.choice(endpoint.queries) if endpoint.queries else "",
    )


KeyBy = Literal["ip", "path"]


def produce(
    bootstrap: str,
    topic: str,
    events: Iterable[AccessEvent],
    key_by: KeyBy = "ip",
    rate: float | None = None,
    chunk: int = 5_000,
) -> int:
    """Send one record per event (value: its log line); the number sent.

    Records are keyed by client ip (a client's lines stay in order) or by
    path. ``rate`` (events per second) paces the sending for a live demo;
    without it the lines go as fast as the broker takes them. Returns once
    every record is acknowledged.
    """
    if rate is not None and rate <= 0:
        raise ValueError("rate is events per second, > 0")
    step = chunk if rate is None else max(1, min(chunk, int(rate / 10)))
    sent = 0
    began = time.monotonic()
    with SyncProducer(bootstrap, linger_ms=20) as producer:
        batch: list[dict[str, object]] = []
        for event in events:
            key = event.ip if key_by == "ip" else event.path
            batch.append(
                {"topic": topic, "value": format_line(event).encode(), "key": key.encode()}
            )
            if len(batch) >= step:
                sent += _send(producer, batch)
                batch = []
                if rate is not None:
                    time.sleep(max(0.0, began + sent / rate - time.monotonic()))
        if batch:
            sent += _send(producer, batch)
    return sent


def _send(producer: SyncProducer, batch: list[dict[str, object]]) -> int:
    producer.send_many(batch, timeout_s=120)
    return len(batch)

"""``GET /metrics``: the broker's metrics in the Prometheus text format.

One :class:`~prometheus_client.CollectorRegistry` per application (never the
library's global one: brokers started in one test process do not collide),
holding one collector that, at each scrape, turns the broker's
:class:`~mq.broker.metrics.Meters` (counters the hot path added to) into
families, and computes the gauges from the broker's state
(:mod:`mq.http.collectors`). The exposition is the library's
(:func:`prometheus_client.generate_latest`), with its content type.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from mq.broker.broker import Broker
from mq.broker.metrics import Histogram, Meters
from mq.http.collectors import state_gauges

USAGE_FIELDS = (
    ("bytes_in", "Bytes produced"),
    ("records_in", "Records produced"),
    ("bytes_out", "Bytes consumed (fetched, or received from queues)"),
    ("records_out", "Records consumed (offsets fetched, or messages received from queues)"),
    ("requests", "Requests made"),
)
"""The usage counters per principal and client id: (field of Usage, help)."""


def _counter(
    name: str, doc: str, labels: list[str], rows: Iterable[tuple[list[str], float]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _histogram(
    name: str, doc: str, labels: list[str], rows: Iterable[tuple[list[str], Histogram]]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, histogram in rows:
        family.add_metric(values, histogram.cumulative(), histogram.sum)
    return family


def counter_families(meters: Meters) -> Iterator[Metric]:
    """The counters and histograms the broker keeps (see :mod:`mq.broker.metrics`)."""
    yield _counter(
        "mq_requests",
        "Requests answered, by API and error (none: success).",
        ["api", "error"],
        [([api, error], n) for (api, error), n in sorted(meters.requests.items())],
    )
    yield _histogram(
        "mq_request_duration_seconds",
        "Time from dispatch to the encoded response, by API (a long poll includes its wait).",
        ["api"],
        [([api], h) for api, h in sorted(meters.latency.items())],
    )
    yield _counter(
        "mq_topic_records_in",
        "Records appended by producers.",
        ["topic"],
        [([t], n) for t, n in sorted(meters.records_in.items())],
    )
    yield _counter(
        "mq_topic_bytes_in",
        "Bytes of record batches appended by producers.",
        ["topic"],
        [([t], n) for t, n in sorted(meters.bytes_in.items())],
    )
    yield _counter(
        "mq_topic_bytes_out",
        "Bytes of record batches sent to consumers (fetch and queue receive).",
        ["topic"],
        [([t], n) for t, n in sorted(meters.bytes_out.items())],
    )
    usage = sorted(meters.usage.items())
    for field, doc in USAGE_FIELDS:
        yield _counter(
            f"mq_client_{field}",
            f"{doc}, per principal and client id.",
            ["principal", "client_id"],
            [([p, c], getattr(u, field)) for (p, c), u in usage],
        )
    yield _counter(
        "mq_queue_dead_lettered",
        "Messages moved to the queue's dead-letter queue.",
        ["queue", "group"],
        [([q, g], n) for (q, g), n in sorted(meters.dead_lettered.items())],
    )
    yield CounterMetricFamily(
        "mq_isr_shrinks",
        "ISR shrinks of partitions led here (by this leader or the controller).",
        meters.isr_shrinks,
    )
    yield CounterMetricFamily(
        "mq_isr_expands", "ISR expansions of partitions led here.", meters.isr_expands
    )
    yield CounterMetricFamily(
        "mq_authentication_failures",
        "Failed authentications.",
        meters.authentication_failures,
    )
    yield _counter(
        "mq_throttle_seconds",
        "Seconds requests were held back by quotas, per principal.",
        ["principal"],
        [([p], s) for p, s in sorted(meters.throttle_s.items())],
    )
    yield _histogram(
        "mq_log_flush_seconds",
        "Duration of log flushes (fsync of segments and recovery checkpoint).",
        [],
        [([], meters.flush)],
    )
    yield _counter(
        "mq_metrics_label_overflow",
        "Updates folded into the __other__ label set by metrics_max_labelled.",
        ["metric"],
        [([m], n) for m, n in sorted(meters.overflow.items())],
    )
    if meters.connections is not None:
        connections = GaugeMetricFamily(
            "mq_connections", "Open connections, per listener.", labels=["listener"]
        )
        for listener, count in sorted(meters.connections().items()):
            connections.add_metric([listener], count)
        yield connections


class BrokerCollector(Collector):
    """Everything ``/metrics`` shows for one broker, computed at collection."""

    def __init__(self, broker: Broker, meters: Meters) -> None:
        self.broker = broker
        self.meters = meters

    def collect(self) -> Iterator[Metric]:
        yield from counter_families(self.meters)
        yield from state_gauges(self.broker, self.meters.max_labelled)


def make_registry(broker: Broker, meters: Meters) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker, meters))
    return registry


def add_routes(app: web.Application, broker: Broker) -> None:
    """``GET /metrics`` (only when the broker counts: it has an HTTP listener)."""
    meters = broker.metrics
    if meters is None:
        return
    registry = make_registry(broker, meters)

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/metrics", metrics)

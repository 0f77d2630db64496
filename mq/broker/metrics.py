"""What the broker counts as it serves: plain numbers, turned into metrics at scrape time.

The hot path adds to dicts of ints (a request's api and error, a produce's
records and bytes per topic, a principal's usage): per request or per batch,
never per record, and with no lock and no metric object (one event loop). A
request's counters are found with one lookup by its API's name (:class:`ApiMeter`)
and its client's usage is cached by its connection (:class:`ClientUsage`).
:mod:`mq.http.metrics` turns them into Prometheus families when someone scrapes
``/metrics``; the gauges (lag, queue depth, sizes, ISR) are not kept here at all,
they are computed from the broker's state at scrape time.

Every labelled counter holds at most ``max_labelled`` label sets
(``metrics_max_labelled``): past it, updates for a new label set are folded
into the label value :data:`OTHER` and counted in :attr:`Meters.overflow` (per
metric), so a client inventing topic names or client ids cannot grow the
broker's memory or the scrape without bound.

The hooks other features call: :meth:`Meters.authentication_failed` (SASL),
:meth:`Meters.throttled` (quotas).

Thread safety: one event loop (the flush observer is called on it too).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TypeVar

OTHER = "__other__"
"""The label value past the cap (see the module docstring)."""
LATENCY_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Upper bounds of the request-duration histogram (a long-polling fetch waits up to
its max_wait_ms, 30 s at most by default: the last bucket)."""
FLUSH_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
"""Upper bounds of the log-flush histogram (an fsync: 0.1 ms on tmpfs to seconds on a
busy disk)."""

K = TypeVar("K")


class Histogram:
    """Bucket counts (non-cumulative, one slot past the last bound for +Inf) and a sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count)`` pairs, cumulative, ending with ``+Inf``."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            total += count
            out.append((repr(bound), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


class Usage:
    """One principal and client id's usage."""

    __slots__ = ("bytes_in", "bytes_out", "records_in", "records_out", "requests")

    def __init__(self) -> None:
        self.bytes_in = self.records_in = 0
        self.bytes_out = self.records_out = 0
        self.requests = 0


class ApiMeter:
    """One API's answered requests by error name ("none": success) and its latency
    histogram: what a request adds to, found with one lookup by the API's name."""

    __slots__ = ("errors", "latency")

    def __init__(self) -> None:
        self.errors: dict[str, int] = {}
        self.latency = Histogram(LATENCY_BUCKETS_S)


class ClientUsage:
    """A connection's cached :class:`Usage`: looked up in the meters' table only when
    the connection's principal or client id changes (authentication, a new client
    id), not per request."""

    __slots__ = ("_client_id", "_principal", "_usage", "meters")

    def __init__(self, meters: Meters) -> None:
        self.meters = meters
        self._principal = ""
        self._client_id: str | None = None
        self._usage: Usage | None = None

    def of(self, principal: str, client_id: str | None) -> Usage:
        usage = self._usage
        if usage is None or client_id != self._client_id or principal != self._principal:
            usage = self._usage = self.meters.usage_of(principal, client_id)
            self._principal, self._client_id = principal, client_id
        return usage


class Meters:
    """The broker's counters (see the module docstring)."""

    def __init__(self, max_labelled: int) -> None:
        self.max_labelled = max_labelled
        self.apis: dict[str, ApiMeter] = {}
        """api -> its requests by error and its latency (seconds from dispatch to the
        response's encoding); API and error names are finite: no cap needed."""
        self.records_in: dict[str, int] = {}
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        """topic -> records and bytes appended by producers, bytes sent to consumers."""
        self.usage: dict[tuple[str, str], Usage] = {}
        """(principal, client id) -> usage."""
        self.dead_lettered: dict[tuple[str, str], int] = {}
        """(queue, share group) -> records moved to the queue's dead-letter queue."""
        self.throttle_s: dict[str, float] = {}
        """principal -> seconds its requests were held back by quotas."""
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.authentication_failures = 0
        self.flush = Histogram(FLUSH_BUCKETS_S)
        self.overflow: Counter[str] = Counter()
        """metric -> updates folded into :data:`OTHER`."""
        self.connections: Callable[[], dict[str, int]] | None = None
        """Open connections per listener, read at scrape time (set by the server)."""

    @property
    def requests(self) -> dict[tuple[str, str], int]:
        """(api, error name or "none") -> requests answered (built at scrape time)."""
        return {(api, e): n for api, m in self.apis.items() for e, n in m.errors.items()}

    @property
    def latency(self) -> dict[str, Histogram]:
        """api -> seconds from dispatch to the response's encoding."""
        return {api: m.latency for api, m in self.apis.items()}

    def _key(self, table: Mapping[K, object], key: K, other: K, metric: str) -> K:
        if key in table or len(table) < self.max_labelled:
            return key
        self.overflow[metric] += 1
        return other

    # -- per request (the connection's dispatch) -------------------------------------

    def request(self, api: str, error: str, seconds: float, usage: Usage) -> None:
        """A request was answered (``error`` is "none" or the error's name); ``usage``
        its client's (:class:`ClientUsage` keeps it per connection)."""
        meter = self.apis.get(api)
        if meter is None:
            meter = self.apis[api] = ApiMeter()
        errors = meter.errors
        errors[error] = errors.get(error, 0) + 1
        meter.latency.observe(seconds)
        usage.requests += 1

    def usage_of(self, principal: str, client_id: str | None) -> Usage:
        key = (principal, client_id or "")
        usage = self.usage.get(key)  # the usual case: one lookup
        if usage is None:
            key = self._key(self.usage, key, (OTHER, OTHER), "mq_client_requests_total")
            usage = self.usage.get(key)
            if usage is None:
                usage = self.usage[key] = Usage()
        return usage

    # -- the data path (per partition of a request) ------------------------------------

    def produced(
        self, topic: str, records: int, size: int, principal: str, client_id: str | None
    ) -> None:
        if topic not in self.bytes_in:
            topic = self._key(self.bytes_in, topic, OTHER, "mq_topic_bytes_in_total")
            self.records_in.setdefault(topic, 0)
            self.bytes_in.setdefault(topic, 0)
        self.records_in[topic] += records
        self.bytes_in[topic] += size
        usage = self.usage_of(principal, client_id)
        usage.records_in += records
        usage.bytes_in += size

    def consumed(
        self, topic: str, records: int, size: int, principal: str, client_id: str | None
    ) -> None:
        if topic not in self.bytes_out:
            topic = self._key(self.bytes_out, topic, OTHER, "mq_topic_bytes_out_total")
            self.bytes_out.setdefault(topic, 0)
        self.bytes_out[topic] += size
        usage = self.usage_of(principal, client_id)
        usage.records_out += records
        usage.bytes_out += size

    def dead_letter(self, queue: str, group: str, records: int) -> None:
        key = self._key(
            self.dead_lettered, (queue, group), (OTHER, OTHER), "mq_queue_dead_lettered_total"
        )
        self.dead_lettered[key] = self.dead_lettered.get(key, 0) + records

    def flushed(self, seconds: float) -> None:
        """A log flush (fsync of segments and checkpoint) took ``seconds``."""
        self.flush.observe(seconds)

    def isr_changed(self, before: int, after: int) -> None:
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1

    # -- hooks for the security features -----------------------------------------------

    def authentication_failed(self) -> None:
        """A SASL authentication failed (the ``auth`` feature calls this)."""
        self.authentication_failures += 1

    def throttled(self, principal: str, seconds: float) -> None:
        """A request of ``principal`` was held back ``seconds`` by a quota."""
        principal = self._key(self.throttle_s, principal, OTHER, "mq_throttle_seconds_total")
        self.throttle_s[principal] = self.throttle_s.get(principal, 0.0) + seconds

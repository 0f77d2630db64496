"""Access-log events, their one-line text form, and the reference aggregation. Pure.

A message of the ``access-logs`` topic is one line of the Combined Log Format
(what nginx and Apache write by default) with the response time in seconds
appended, as nginx's ``$request_time`` is in many real configurations (one
line, broken here to fit)::

    10.0.3.7 - - [21/Nov/2026:10:00:03 +0000] "GET /api/orders HTTP/1.1" 200 1532
        "-" "Mozilla/5.0" 0.023

:data:`LINE_PATTERN` is the one regular expression both sides use: the Spark
job hands it to ``regexp_extract`` (Java regex) and :func:`parse_line` to
Python's ``re``; it is written in the common subset of the two (numbered
groups only), so that both read a line the same way. The path is taken without
its query string: ``/api/search?q=shoes`` counts as ``/api/search``, which is
what a per-endpoint dashboard wants.

:func:`aggregate` computes, without Spark, what the Spark job must output:
per 1-minute window and path, the counts, bytes and latencies of the windows
that an append-mode streaming query has closed once it has seen every line,
i.e. those whose end is at or before the watermark (max event time - delay).
Latencies are kept as whole milliseconds, so sums are exact on both sides and
averages are the same IEEE division of the same two integers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Final

LINE_PATTERN: Final = (
    r"^(\S+) \S+ \S+ \[([^\]]+)\] "  # 1 client ip, ident, user, 2 [time]
    r'"(\S+) ([^ ?"]+)(?:\?[^ "]*)? ([^ "]+)" '  # 3 method, 4 path (no query), 5 protocol
    r"(\d{3}) (\d+|-) "  # 6 status, 7 bytes ("-" for none)
    r'"([^"]*)" "([^"]*)" '  # 8 referer, 9 user agent
    r"(\d+(?:\.\d+)?)$"  # 10 response time, seconds
)
"""The line format, as a regex both Java (Spark) and Python read alike; numbered groups:"""
GROUPS: Final = {
    "ip": 1,
    "time": 2,
    "method": 3,
    "path": 4,
    "protocol": 5,
    "status": 6,
    "bytes": 7,
    "referer": 8,
    "user_agent": 9,
    "latency": 10,
}
TIME_FORMAT_SPARK: Final = "dd/MMM/yyyy:HH:mm:ss Z"
"""The ``[time]`` field as a Spark datetime pattern (English month names, numeric offset)."""

MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
"""Log month names, independent of the locale (``strftime("%b")`` is not)."""
_TIME = re.compile(
    r"^(\d{2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})$"
)
_LINE = re.compile(LINE_PATTERN)


@dataclass(frozen=True)
class AccessEvent:
    """One request as the web server logged it.

    ``time`` is timezone-aware (the log line carries its offset); ``bytes``
    is None for a response without a body (logged as ``-``, e.g. a 304);
    ``latency_ms`` is the response time, in whole milliseconds.
    """

    ip: str
    time: datetime
    method: str
    path: str
    status: int
    bytes: int | None
    latency_ms: int
    protocol: str = "HTTP/1.1"
    referer: str = "-"
    user_agent: str = "-"
    query: str = ""
    """The query string without its ``?``; logged, but not part of the aggregation key."""


def format_time(time: datetime) -> str:
    """``21/Nov/2026:10:00:03 +0000``: the log's timestamp, whole seconds, with offset."""
    if time.tzinfo is None:
        raise ValueError("an access-log time needs a timezone")
    offset = time.utcoffset() or timedelta(0)
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    return (
        f"{time.day:02d}/{MONTHS[time.month - 1]}/{time.year:04d}:"
        f"{time.hour:02d}:{time.minute:02d}:{time.second:02d} "
        f"{sign}{minutes // 60:02d}{minutes % 60:02d}"
    )


def parse_time(text: str) -> datetime | None:
    """The inverse of :func:`format_time`; None for anything else."""
    match = _TIME.match(text)
    if match is None or match.group(2) not in MONTHS:
        return None
    day, month, year, hour, minute, second, sign, off_h, off_m = match.groups()
    offset = timedelta(hours=int(off_h), minutes=int(off_m))
    try:
        return datetime(
            int(year),
            MONTHS.index(month) + 1,
            int(day),
            int(hour),
            int(minute),
            int(second),
            tzinfo=timezone(-offset if sign == "-" else offset),
        )
    except ValueError:  # 31/Feb, 25:00 and the like
        return None


def format_line(event: AccessEvent) -> str:
    """The event as one Combined Log Format line, response time (seconds) last."""
    target = f"{event.path}?{event.query}" if event.query else event.path
    size = "-" if event.bytes is None else str(event.bytes)
    seconds = f"{event.latency_ms // 1000}.{event.latency_ms % 1000:03d}"
    return (
        f"{event.ip} - - [{format_time(event.time)}] "
        f'"{event.method} {target} {event.protocol}" {event.status} {size} '
        f'"{event.referer}" "{event.user_agent}" {seconds}'
    )


def parse_line(line: str | bytes) -> AccessEvent | None:
    """The event a line describes, or None if it is not a well-formed access-log line.

    None is what the Spark job's filter drops too: a line that does not match
    :data:`LINE_PATTERN`, or whose time is not a real date.
    """
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    match = _LINE.match(line)
    if match is None:
        return None
    time = parse_time(match.group(GROUPS["time"]))
    if time is None:
        return None
    size = match.group(GROUPS["bytes"])
    target_query = line[match.end(GROUPS["path"]) : match.start(GROUPS["protocol"]) - 1]
    return AccessEvent(
        ip=match.group(GROUPS["ip"]),
        time=time,
        method=match.group(GROUPS["method"]),
        path=match.group(GROUPS["path"]),
        status=int(match.group(GROUPS["status"])),
        bytes=None if size == "-" else int(size),
        latency_ms=latency_ms(match.group(GROUPS["latency"])),
        protocol=match.group(GROUPS["protocol"]),
        referer=match.group(GROUPS["referer"]),
        user_agent=match.group(GROUPS["user_agent"]),
        query=target_query.removeprefix("?"),
    )


def latency_ms(seconds: str) -> int:
    """``"0.023"`` as 23: exact decimal arithmetic, rounding half up as Spark's decimal cast."""
    value = Decimal(seconds) * 1000
    return int(value.quantize(Decimal(1), rounding="ROUND_HALF_UP"))


@dataclass(frozen=True)
class WindowStats:
    """One row of the job's output: a path's requests in one tumbling window."""

    window_start: datetime
    window_end: datetime
    path: str
    requests: int
    client_errors: int
    """Responses 400-499."""
    errors: int
    """Responses >= 500: the server's failures, the number an on-call watches."""
    error_rate: float
    """errors / requests."""
    bytes: int
    avg_latency_ms: float
    max_latency_ms: int

    @property
    def key(self) -> str:
        """The output record's key: ``2026-11-21T10:00:00Z|/api/orders``."""
        return f"{iso(self.window_start)}|{self.path}"


COLUMNS: Final = tuple(WindowStats.__dataclass_fields__)
"""The output columns, in order: the Parquet schema and the JSON fields."""


def iso(time: datetime) -> str:
    """``2026-11-21T10:00:00Z``: how the output names a window's start and end (UTC)."""
    return time.astimezone(UTC).strftime(_ISO)


_ISO: Final = "%Y-%m-%dT%H:%M:%SZ"


def stats_to_json(stats: WindowStats) -> str:
    """The output record's value, as the job writes it: the columns in order, times ISO."""
    row: dict[str, object] = {name: getattr(stats, name) for name in COLUMNS}
    row["window_start"], row["window_end"] = iso(stats.window_start), iso(stats.window_end)
    return json.dumps(row, separators=(",", ":"))


def stats_from_json(value: str | bytes) -> WindowStats:
    """A record of the output topic as :class:`WindowStats` (what a downstream consumer does)."""
    row = json.loads(value)
    if not isinstance(row, dict) or set(row) != set(COLUMNS):
        raise ValueError(f"not a window-stats record: {value!r}")
    return WindowStats(
        window_start=datetime.strptime(row["window_start"], _ISO).replace(tzinfo=UTC),
        window_end=datetime.strptime(row["window_end"], _ISO).replace(tzinfo=UTC),
        path=str(row["path"]),
        requests=int(row["requests"]),
        client_errors=int(row["client_errors"]),
        errors=int(row["errors"]),
        error_rate=float(row["error_rate"]),
        bytes=int(row["bytes"]),
        avg_latency_ms=float(row["avg_latency_ms"]),
        max_latency_ms=int(row["max_latency_ms"]),
    )


def aggregate(
    lines: Iterable[str | bytes], delay: timedelta, window: timedelta = timedelta(minutes=1)
) -> list[WindowStats]:
    """The final windows of ``lines``, sorted by window start, then path.

    A window is final once the watermark, the latest event time seen minus
    ``delay``, is at or past its end: an append-mode query emits exactly those
    (and keeps the others open, waiting for late events). Lines that do not
    parse are skipped, as the job drops them.
    """
    width = int(window.total_seconds())
    if width <= 0 or width != window.total_seconds():
        raise ValueError(f"a window is a whole number of seconds > 0, not {window}")
    groups: dict[tuple[int, str], list[AccessEvent]] = {}
    latest: int | None = None
    for line in lines:
        event = parse_line(line)
        if event is None:
            continue
        second = int(event.time.timestamp())
        latest = second if latest is None else max(latest, second)
        groups.setdefault((second - second % width, event.path), []).append(event)
    if latest is None:
        return []
    watermark = latest - int(delay.total_seconds())
    return [
        _stats(start, width, path, events)
        for (start, path), events in sorted(groups.items())
        if start + width <= watermark
    ]


def _stats(start: int, width: int, path: str, events: list[AccessEvent]) -> WindowStats:
    requests = len(events)
    errors = sum(1 for e in events if e.status >= 500)
    latencies = [e.latency_ms for e in events]
    return WindowStats(
        window_start=datetime.fromtimestamp(start, UTC),
        window_end=datetime.fromtimestamp(start + width, UTC),
        path=path,
        requests=requests,
        client_errors=sum(1 for e in events if 400 <= e.status < 500),
        errors=errors,
        error_rate=errors / requests,
        bytes=sum(e.bytes or 0 for e in events),
        avg_latency_ms=sum(latencies) / requests,
        max_latency_ms=max(latencies),
    )

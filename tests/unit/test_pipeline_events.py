"""The log pipeline's pure parts: the line format, its parser, the reference aggregation,
the traffic generator, the report table and the reading of Spark's file sink log (no
Spark, no broker)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_connector.pipeline.events import (
    COLUMNS,
    AccessEvent,
    WindowStats,
    aggregate,
    format_line,
    format_time,
    latency_ms,
    parse_line,
    parse_time,
    stats_from_json,
    stats_to_json,
)
from spark_connector.pipeline.generator import TrafficConfig, generate_events
from spark_connector.pipeline.report import table
from spark_connector.pipeline.results import OutputLogError, committed_files, read_parquet

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
TWO_MINUTES = timedelta(minutes=2)


def line(second: float, path: str, status: int, size: str, latency: str) -> str:
    """A hand-written log line ``second`` seconds after T0 (the tests' own formatter)."""
    at = T0 + timedelta(seconds=second)
    return (
        f'10.0.0.1 - - [{at:%d}/Nov/2026:{at:%H:%M:%S} +0000] "GET {path} HTTP/1.1" '
        f'{status} {size} "-" "curl/8.5.0" {latency}'
    )


def test_a_line_is_combined_log_format_with_the_response_time_last() -> None:
    event = AccessEvent(
        ip="10.0.3.7",
        time=datetime(2026, 11, 21, 10, 0, 3, tzinfo=UTC),
        method="GET",
        path="/api/orders",
        status=200,
        bytes=1532,
        latency_ms=23,
        user_agent="Mozilla/5.0",
    )
    text = '10.0.3.7 - - [21/Nov/2026:10:00:03 +0000] "GET /api/orders HTTP/1.1" 200 1532 "-" "Mozilla/5.0" 0.023'  # noqa: E501
    assert format_line(event) == text
    assert parse_line(text) == event
    assert parse_line(text.encode()) == event


def test_generated_events_survive_the_round_trip() -> None:
    events = list(generate_events(TrafficConfig(seed=3, events=3_000)))
    assert [parse_line(format_line(e)) for e in events] == events
    assert any(e.query for e in events)  # query strings, kept out of the path
    assert any(e.bytes is None for e in events)  # 304s, logged as "-"
    assert any(e.latency_ms >= 30_000 for e in events)  # 504 timeouts


def test_the_query_string_is_not_part_of_the_path() -> None:
    event = parse_line(line(1, "/api/search?q=red+shoes&page=2", 200, "10", "0.5"))
    assert event is not None
    assert (event.path, event.query) == ("/api/search", "q=red+shoes&page=2")
    assert format_line(event) == line(1, "/api/search?q=red+shoes&page=2", 200, "10", "0.500")


def test_a_time_keeps_its_offset() -> None:
    text = "21/Nov/2026:05:00:03 -0500"
    parsed = parse_time(text)
    assert parsed == datetime(2026, 11, 21, 10, 0, 3, tzinfo=UTC)
    assert parsed is not None
    assert format_time(parsed) == text
    assert (
        format_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=5, minutes=30))))
        == "02/Jan/2026:03:04:05 +0530"
    )
    with pytest.raises(ValueError, match="timezone"):
        format_time(datetime(2026, 1, 2))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        line(1, "/", 200, "10", ""),  # no response time
        line(1, "/", 200, "ten", "0.1"),
        line(1, "/", 20, "10", "0.1"),  # a 2-digit status
        line(1, "/", 200, "10", "0.1") + " trailing",
        line(1, "/", 200, "10", "0.1").replace("Nov", "Noc"),
        line(1, "/", 200, "10", "0.1").replace("21/Nov", "31/Feb"),  # not a date
        line(1, "/", 200, "10", "0.1").replace("10:00:01", "25:00:01"),
        line(1, "/", 200, "10", "0.1").replace(" +0000", ""),
        line(1, "/", 200, "10", "0.1").replace('"GET / HTTP/1.1"', '"GET /"'),
    ],
)
def test_a_malformed_line_parses_to_none(text: str) -> None:
    assert parse_line(text) is None


def test_no_body_is_none_bytes_and_latencies_are_exact_milliseconds() -> None:
    event = parse_line(line(1, "/static/app.js", 304, "-", "0.0025"))
    assert event is not None
    assert (event.status, event.bytes, event.latency_ms) == (304, None, 3)
    assert [latency_ms(s) for s in ("0.023", "0.0235", "0.0234", "1.5", "12", "30.001")] == [
        23,
        24,
        23,
        1_500,
        12_000,
        30_001,
    ]


def test_aggregate_a_hand_written_log() -> None:
    lines = [
        line(5, "/api/orders", 200, "100", "0.020"),
        line(65, "/", 200, "10", "0.004"),  # the next window
        line(50, "/api/orders", 503, "-", "0.100"),
        "not an access-log line",
        line(59, "/", 404, "7", "0.001"),
        line(0, "/", 200, "5", "0.002"),
        line(119, "/api/orders", 200, "1", "0.001"),
        line(180, "/healthz", 200, "2", "0.001"),  # the latest: watermark 10:03:00 - 2 min
    ]
    assert aggregate(lines, TWO_MINUTES) == [
        WindowStats(T0, T0 + timedelta(minutes=1), "/", 2, 1, 0, 0.0, 12, 1.5, 2),
        WindowStats(T0, T0 + timedelta(minutes=1), "/api/orders", 2, 0, 1, 0.5, 100, 60.0, 100),
    ]  # 10:00-10:01 ends at the watermark: final; 10:01-10:02 ends after it: still open
    one_second_less = [*lines[:-1], line(179, "/healthz", 200, "2", "0.001")]
    assert aggregate(one_second_less, TWO_MINUTES) == []
    later = aggregate([*lines, line(240, "/", 200, "1", "0.001")], TWO_MINUTES)
    assert [(s.window_start.minute, s.path, s.requests) for s in later] == [
        (0, "/", 2),
        (0, "/api/orders", 2),
        (1, "/", 1),
        (1, "/api/orders", 1),
    ]
    assert aggregate(
        [*lines, line(999, "/", 200, "1", "0.001")], timedelta(0), timedelta(minutes=5)
    )[0] == WindowStats(T0, T0 + timedelta(minutes=5), "/", 3, 1, 0, 0.0, 22, 7 / 3, 4)


def test_aggregate_of_nothing_and_bad_windows() -> None:
    assert aggregate([], TWO_MINUTES) == []
    assert aggregate(["junk"], TWO_MINUTES) == []
    with pytest.raises(ValueError, match="whole number"):
        aggregate([], TWO_MINUTES, timedelta(seconds=1.5))


def test_window_stats_as_json_and_back() -> None:
    stats = WindowStats(T0, T0 + timedelta(minutes=1), "/api/cart", 3, 1, 1, 1 / 3, 10, 2.5, 4)
    text = stats_to_json(stats)
    assert text.startswith('{"window_start":"2026-11-21T10:00:00Z","window_end":"2026-11-21T10:01')
    assert stats_from_json(text) == stats
    assert stats_from_json(text.encode()) == stats
    assert stats.key == "2026-11-21T10:00:00Z|/api/cart"
    with pytest.raises(ValueError, match="not a window-stats record"):
        stats_from_json('{"path": "/"}')


def test_the_generator_is_deterministic_and_lateness_is_bounded() -> None:
    config = TrafficConfig(seed=5, events=4_000, per_second=10, max_lateness=timedelta(seconds=20))
    events = list(generate_events(config))
    assert events == list(generate_events(config))
    assert events != list(generate_events(replace(config, seed=6)))
    assert len(events) == 4_000
    latest = list(itertools.accumulate((e.time for e in events), max))
    lags = [(high - e.time).total_seconds() for high, e in zip(latest, events, strict=True)]
    assert max(lags) < 21  # lateness, plus the second the log format truncates
    assert max(lags) > 10  # out of order indeed
    span = (latest[-1] - min(e.time for e in events)).total_seconds()
    assert 399 - 20 <= span <= 400 + 20  # 4,000 events at 10 per second
    statuses = {e.status for e in events}
    assert statuses >= {200, 201, 304, 404, 500}


def test_the_incident_fails_checkout_for_a_while() -> None:
    config = TrafficConfig(seed=2, events=20_000, per_second=20, max_lateness=timedelta(0))

    def checkout_error_rate(events: list[AccessEvent], inside: bool) -> float:
        start, end = T0 + timedelta(minutes=5), T0 + timedelta(minutes=8)
        hits = [
            e for e in events if e.path == "/api/checkout" and (start <= e.time < end) == inside
        ]
        return sum(e.status >= 500 for e in hits) / len(hits)

    events = list(generate_events(config))
    assert checkout_error_rate(events, inside=True) > 0.35
    assert checkout_error_rate(events, inside=False) < 0.08
    calm = list(generate_events(replace(config, incident=None)))
    assert checkout_error_rate(calm, inside=True) < 0.1


@pytest.mark.parametrize(
    "bad",
    [
        {"events": -1},
        {"per_second": 0},
        {"clients": 0},
        {"start": datetime(2026, 1, 1)},
        {"max_lateness": timedelta(seconds=-1)},
    ],
)
def test_traffic_config_rejects_nonsense(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        TrafficConfig(**bad)  # type: ignore[arg-type]


def test_the_table_sorts_and_cuts() -> None:
    def stats(minute: int, path: str, errors: int) -> WindowStats:
        start = T0 + timedelta(minutes=minute)
        return WindowStats(start, start + timedelta(minutes=1), path, 10, 0, errors,
                           errors / 10, 2_048, 12.25, 40)  # fmt: skip

    rows = [stats(0, "/a", 1), stats(1, "/b", 5), stats(2, "/a", 0)]
    text = table(rows, "error_rate", limit=2).splitlines()
    assert text[0].split()[:3] == ["window", "(UTC)", "path"]
    assert text[1].split() == [
        "2026-11-21", "10:01-10:02", "/b", "10", "0", "5", "50.0%", "2.0", "KB", "12.2", "40",
    ]  # fmt: skip
    assert text[2].split()[1:3] == ["10:00-10:01", "/a"]
    assert text[3] == "... and 1 more"
    assert [r.split()[1] for r in table(rows).splitlines()[1:]] == [
        "10:00-10:01",
        "10:01-10:02",
        "10:02-10:03",
    ]


def write_log(directory: Path, name: str, *entries: tuple[str, Path]) -> None:
    lines = ["v1"] + [
        json.dumps({"path": path.as_uri(), "size": 1, "isDir": False, "action": action})
        for action, path in entries
    ]
    (directory / name).write_text("\n".join(lines) + "\n")


def one_window(minute: int) -> WindowStats:
    start = T0 + timedelta(minutes=minute)
    return WindowStats(start, start + timedelta(minutes=1), "/", minute, 0, 0, 0.0, 10, 1.0, 1)


def test_only_files_of_committed_batches_are_read(tmp_path: Path) -> None:
    rows = [one_window(m) for m in range(4)]
    files = {}
    for m, row in enumerate(rows):
        record = {name: getattr(row, name) for name in COLUMNS}
        for name in ("window_start", "window_end"):  # naive UTC: how pyarrow reads Spark's
            record[name] = record[name].replace(tzinfo=None)  # INT96 timestamps
        files[m] = tmp_path / f"part-{m}.parquet"
        pq.write_table(pa.Table.from_pylist([record]), files[m])
    assert read_parquet(tmp_path) == []  # no log, no committed file
    log = tmp_path / "_spark_metadata"
    log.mkdir()
    write_log(log, "8", ("add", files[3]))  # compacted into 9.compact: not read again
    write_log(log, "9.compact", ("add", files[0]), ("add", files[1]))
    write_log(log, "10", ("add", files[2]), ("delete", files[1]))
    (log / ".10.crc").write_text("checksum")
    assert committed_files(tmp_path) == [files[0], files[2]]
    assert read_parquet(tmp_path) == [rows[0], rows[2]]
    (log / "11").write_text("v2\n{}\n")
    with pytest.raises(OutputLogError, match="v1"):
        committed_files(tmp_path)

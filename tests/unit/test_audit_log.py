"""The audit log file (:mod:`mq.broker.audit`): rotation bounds its disk, reading goes
oldest first over the rotated files, huge details are truncated, a cut last line is
skipped, and ``mq audit --since`` parses durations and times."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click
import pytest
from mq_cli.audit import since_ms

from mq.broker.audit import AUDIT_DIR, LINES_PER_TURN, MAX_LINE_BYTES, AuditLog, read_audit
from mq.broker.context import RequestContext
from mq.wire import apis_core
from mq.wire.messages import Request


def ctx() -> RequestContext:
    return RequestContext(1, "127.0.0.1:5000", client_id="tool")


def test_rotation_keeps_at_most_max_files_and_reads_oldest_first(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path, 3, max_bytes=2_000, max_files=2)
    for i in range(100):
        audit(ctx(), "create_topics", f"topic:t{i}", "ok", n=i)
    audit.close()
    files = sorted(p.name for p in (tmp_path / AUDIT_DIR).iterdir())
    assert files == ["audit.log", "audit.log.1", "audit.log.2"]
    assert all((tmp_path / AUDIT_DIR / f).stat().st_size <= 2_000 for f in files)
    read = list(read_audit(tmp_path))
    numbers = [r["details"]["n"] for r in read]
    assert numbers == list(range(numbers[0], 100))  # the newest kept, in order
    assert 0 < numbers[0] < 100 - 2 * len(numbers) // 3  # older ones were rotated away
    assert read[-1]["broker"] == 3
    assert read[-1]["client_id"] == "tool"


def test_huge_details_are_truncated(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path, 0, max_bytes=1 << 20, max_files=1)
    audit(ctx(), "alter_partition_reassignments", "topic:t", "ok", partitions=list(range(50_000)))
    audit.close()
    line = (tmp_path / AUDIT_DIR / "audit.log").read_text()
    assert len(line) <= MAX_LINE_BYTES
    assert json.loads(line)["details"] == {"truncated": True}


def test_a_cut_line_is_skipped_and_since_filters(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path, 0, max_bytes=1 << 20, max_files=1)
    audit(ctx(), "delete_topics", "topic:a", "ok")
    audit.close()
    path = tmp_path / AUDIT_DIR / "audit.log"
    with path.open("a") as f:
        f.write('{"time": "cut by a cra')
    read = list(read_audit(tmp_path))
    assert [r["resource"] for r in read] == ["topic:a"]
    assert list(read_audit(tmp_path, since_ms=read[0]["time_ms"] + 1)) == []


def test_since_takes_durations_and_times() -> None:
    now = 1_000_000.0
    assert since_ms("90s", now) == (now - 90) * 1000
    assert since_ms("15m", now) == (now - 900) * 1000
    assert since_ms("2h", now) == (now - 7200) * 1000
    assert since_ms("1d", now) == (now - 86_400) * 1000
    assert since_ms("1970-01-01T00:00:10Z", now) == 10_000
    assert since_ms("1970-01-01T00:00:10", now) == 10_000  # no zone: UTC
    with pytest.raises(click.BadParameter):
        since_ms("yesterday", now)


def _delete_topics(names: list[str]) -> tuple[Request[Any], dict[str, Any]]:
    request = Request(apis_core.DELETE_TOPICS, 0, 1, "tool", {"topics": names, "timeout_ms": 1000})
    answer = {"topics": [{"name": n, "error": 0, "message": None} for n in names]}
    return request, answer


def _resources(tmp_path: Path) -> list[str]:
    return [r["resource"] for r in read_audit(tmp_path)]


async def test_a_big_request_is_written_a_chunk_per_turn_of_the_loop(tmp_path: Path) -> None:
    """Issue 18: 20,000 lines written in one go held the event loop for a second."""
    audit = AuditLog(tmp_path, 0, max_bytes=1 << 30, max_files=1)
    names = [f"t{i:05d}" for i in range(5 * LINES_PER_TURN + 7)]
    audit.request(ctx(), *_delete_topics(names), None)
    small, small_answer = _delete_topics(["after"])
    audit.request(ctx(), small, small_answer, None)  # waits its turn: the order is kept
    assert len(_resources(tmp_path)) <= LINES_PER_TURN  # the caller was not held
    seen = []
    for _ in range(100):  # bounded: the writer needs 7 turns
        await asyncio.sleep(0)
        seen.append(len(_resources(tmp_path)))
        if seen[-1] == len(names) + 1:
            break
    assert 0 < min(seen) < len(names)  # part written while the loop turned
    assert _resources(tmp_path) == [f"topic:{n}" for n in [*names, "after"]]
    audit.close()


async def test_close_writes_what_waits(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path, 0, max_bytes=1 << 30, max_files=1)
    names = [f"t{i:05d}" for i in range(3 * LINES_PER_TURN)]
    audit.request(ctx(), *_delete_topics(names), None)
    await asyncio.sleep(0)  # the writer is in the middle of it
    assert 0 < len(_resources(tmp_path)) < len(names)
    audit.close()
    assert _resources(tmp_path) == [f"topic:{n}" for n in names]


def test_without_an_event_loop_a_big_request_is_written_at_once(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path, 0, max_bytes=1 << 30, max_files=1)
    names = [f"t{i:05d}" for i in range(2 * LINES_PER_TURN)]
    audit.request(ctx(), *_delete_topics(names), None)
    assert len(_resources(tmp_path)) == len(names)
    audit.close()


async def test_a_topic_named_again_with_the_same_outcome_is_one_line(tmp_path: Path) -> None:
    """Issue 18: an alter_configs naming one topic 20,000 times (each refused as repeated)
    wrote 20,000 identical lines, ~1.5 s of the event loop per request; a name's
    different outcomes keep a line each; skipping still gives the loop its turns."""
    audit = AuditLog(tmp_path, 0, max_bytes=1 << 30, max_files=1)
    times = 20 * LINES_PER_TURN
    refused = {"name": "t", "error": 42, "message": "t appears more than once"}
    body = {"topics": [{"name": "t", "configs": {"retention.ms": "1"}}] * times}
    body["topics"].append({"name": "other", "configs": {}})
    request = Request(apis_core.ALTER_CONFIGS, 0, 1, "tool", body)
    answer = {"topics": [refused] * (times - 1) + [{**refused, "error": 0}, refused]}
    answer["topics"][-1] = {"name": "other", "error": 0, "message": None}
    audit.request(ctx(), request, answer, None)
    turns = 0
    while len(_resources(tmp_path)) < 3 and turns < 1000:
        await asyncio.sleep(0)
        turns += 1
    records = list(read_audit(tmp_path))
    assert [(r["resource"], r["result"]) for r in records] == [
        ("topic:t", "INVALID_REQUEST"),
        ("topic:t", "ok"),
        ("topic:other", "ok"),
    ]
    assert records[0]["details"] == {"configs": {"retention.ms": "1"}}
    assert turns >= times // LINES_PER_TURN - 2  # the skipping gave the loop turns
    audit.close()

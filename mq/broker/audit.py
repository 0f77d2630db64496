"""The audit log: who changed what, from where, and how it ended.

Every admin request a client makes (create/delete topics and queues, alter
configs, delete records, leader elections, partition reassignments) becomes one
JSON line per resource it names in ``<data_dir>/audit/audit.log``, written by
the broker that received it (a request forwarded to the controller is not
written twice: requests from brokers are not audited), after its answer is
known, or when the gate refused it::

    {"time": "2026-11-27T15:02:03.456Z", "time_ms": 1795791723456, "broker": 0,
     "principal": "User:ANONYMOUS", "client_address": "127.0.0.1:50312",
     "client_id": "mq-admin", "operation": "create_topics", "resource": "topic:orders",
     "result": "ok", "message": null, "details": {"partitions": 3, ...}}

``result`` is ``ok`` or the error's name (``TOPIC_ALREADY_EXISTS``, ...). A topic
a request names more than once with the same result is one record (an
``alter_configs`` naming one topic 20,000 times, refused as repeated each time,
wrote 20,000 identical lines: issue 18). Other
features call the one-line hook ``broker.audit(ctx, operation, resource,
result, **details)`` for what they change (ACLs, users, quotas).

Bounds: a line is at most :data:`MAX_LINE_BYTES` (larger details are replaced
by ``{"truncated": true}``); the file rotates at ``audit_max_bytes`` into
``audit.log.1`` ... ``audit.log.<audit_max_files>`` (the oldest is deleted).
Lines are written with ``write`` + ``flush`` (the page cache: they survive a
crash of the process, not of the machine) on the event loop, a request's lines
together. A request naming more than :data:`LINES_PER_TURN` topics (an
``alter_configs`` may name 100,000) is written by a task, that many lines per
turn of the loop: written in one go it held every other client for a second
(issue 18's isolation benchmark: a fresh connection's ``api_versions`` waited
1.5 s behind such requests). Requests are written in the order they were
answered; :data:`MAX_PENDING` bounds the ones waiting for that task. A failed
write is logged (at most once per :data:`WARN_INTERVAL_S`) and does not fail the
request.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from mq.broker.context import RequestContext
from mq.broker.pacing import ENTRIES_PER_TURN
from mq.errors import MQError, error_for_code
from mq.wire import apis_cluster, apis_core
from mq.wire.messages import Request

log = logging.getLogger(__name__)

AUDIT_DIR = "audit"
AUDIT_FILE = "audit.log"
MAX_LINE_BYTES = 64 * 1024
"""A record's JSON line at most (a reassignment of 10,000 partitions would otherwise
write megabytes per topic): past it, its details are dropped and marked truncated."""
WARN_INTERVAL_S = 60.0
"""At most one warning per this many seconds about failed audit writes."""
LINES_PER_TURN = ENTRIES_PER_TURN
"""Audit lines formatted and written per turn of the event loop (~10 us each: a few
milliseconds per turn); a request naming at most this many topics is written at once."""
MAX_PENDING = 1_000
"""Audited requests waiting for the writing task at most (each holds its request and
answer bodies). Past it the waiting ones are written at once, holding the loop: a
client cannot make the broker keep unbounded audit work, and no record is dropped."""

AUDITED_APIS: dict[int, str] = {
    apis_core.CREATE_TOPICS.key: "create_topics",
    apis_core.DELETE_TOPICS.key: "delete_topics",
    apis_core.ALTER_CONFIGS.key: "alter_configs",
    apis_core.DELETE_RECORDS.key: "delete_records",
    apis_cluster.ELECT_LEADERS.key: "elect_leaders",
    apis_cluster.ALTER_PARTITION_REASSIGNMENTS.key: "alter_partition_reassignments",
}
"""Admin APIs written to the audit log (api key -> operation). Queues are topics with
``queue.*`` configs: creating, purging (delete records) and deleting one is here too."""


def _result(entry: dict[str, Any]) -> tuple[str, str | None]:
    """``ok`` or the error's name, and its message, of one topic's answer (for a
    per-partition answer: the first partition that failed)."""
    failed = [entry] if entry.get("error") else []
    partitions = entry.get("partitions")
    if isinstance(partitions, list):  # create_topics answers a count here
        failed += [p for p in partitions if isinstance(p, dict) and p.get("error")]
    if not failed:
        return "ok", None
    return error_for_code(failed[0]["error"]).name, failed[0].get("message")


def _request_topics(body: Any) -> dict[str, Any]:
    """The request's entry for each topic it names (the last one of a name), by name:
    a name alone for requests that list names. One pass that copies nothing; the
    details of an entry are made only for the lines written (:func:`_details`)."""
    topics = body.get("topics") if isinstance(body, dict) else None
    return {topic if isinstance(topic, str) else topic["name"]: topic for topic in topics or ()}


def _details(entry: Any) -> dict[str, Any]:
    """A requested topic's entry without its name (nothing for a name alone)."""
    if isinstance(entry, dict):
        return {k: v for k, v in entry.items() if k != "name"}
    return {}


Who = tuple[str, str, str | None]
"""A request's principal, client address and client id, as the audit records name them."""
_Job = tuple[Who, Request[Any], Any, "MQError | None"]


class AuditLog:
    """Appends audit records to ``<data_dir>/audit/audit.log``, rotating it."""

    def __init__(self, data_dir: Path, node_id: int, max_bytes: int, max_files: int) -> None:
        self.directory = data_dir / AUDIT_DIR
        self.path = self.directory / AUDIT_FILE
        self.node_id = node_id
        self.max_bytes = max_bytes
        self.max_files = max_files
        self._file: IO[str] | None = None
        self._size = 0
        self._last_warning = -WARN_INTERVAL_S
        self._pending: deque[_Job] = deque()
        """Answered requests whose records the writing task has not written yet."""
        self._writer: asyncio.Task[None] | None = None
        self._current: Iterator[str] | None = None
        """The lines of the request the writing task is in the middle of (it has written
        every line before them: it awaits only between chunks)."""

    def __call__(
        self,
        ctx: RequestContext,
        operation: str,
        resource: str,
        result: str,
        message: str | None = None,
        **details: Any,
    ) -> None:
        """Write one record (the hook other features call)."""
        who = (ctx.principal, ctx.peer, ctx.client_id)
        self._write(self._line(who, operation, resource, result, message, details))

    def _line(
        self,
        who: Who,
        operation: str,
        resource: str,
        result: str,
        message: str | None,
        details: dict[str, Any],
    ) -> str:
        now = time.time()
        principal, address, client_id = who
        record = {
            "time": datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
            "time_ms": int(now * 1000),
            "broker": self.node_id,
            "principal": principal,
            "client_address": address,
            "client_id": client_id,
            "operation": operation,
            "resource": resource,
            "result": result,
            "message": message,
            "details": details,
        }
        line = json.dumps(record, default=str, separators=(",", ":"))
        if len(line) > MAX_LINE_BYTES:
            record["details"] = {"truncated": True}
            line = json.dumps(record, default=str, separators=(",", ":"))
        return line + "\n"

    def request(
        self, ctx: RequestContext, request: Request[Any], body: Any, error: MQError | None
    ) -> None:
        """Audit an admin request once answered: one record per topic it named, with that
        topic's result, or the request's error for each if it failed as a whole. Never
        raises: a bug here must not cost the client its answer. A small request is
        written now; a big one, or any while others wait, by the writing task."""
        job: _Job = ((ctx.principal, ctx.peer, ctx.client_id), request, body, error)
        topics = request.body.get("topics") if isinstance(request.body, dict) else None
        small = not isinstance(topics, list) or len(topics) <= LINES_PER_TURN
        if small and not self._pending:
            self._write_job(job)
            return
        self._pending.append(job)
        if len(self._pending) > MAX_PENDING:
            self.drain()
            return
        if self._writer is None or self._writer.done():
            try:
                self._writer = asyncio.get_running_loop().create_task(
                    self._write_pending(), name="audit-writer"
                )
            except RuntimeError:  # no event loop (a tool writing records): at once
                self.drain()

    def drain(self) -> None:
        """Write every waiting request's records now."""
        if self._current is not None:
            self._write("".join(self._current))
            self._current = None
        while self._pending:
            self._write_job(self._pending.popleft())

    def _write_job(self, job: _Job) -> None:
        self._write("".join(self._lines(job)))

    async def _write_pending(self) -> None:
        while self._pending:
            lines = self._current = self._lines(self._pending.popleft())
            chunk: list[str] = []
            for line in lines:  # (empty once drain() has written the rest)
                chunk.append(line)
                if len(chunk) >= LINES_PER_TURN or not line:  # "": a turn's worth skipped
                    self._write("".join(chunk))
                    chunk = []
                    await asyncio.sleep(0)
            self._current = None
            self._write("".join(chunk))
            await asyncio.sleep(0)

    def _lines(self, job: _Job) -> Iterator[str]:
        """The job's lines (none if formatting them fails: logged)."""
        who, request, body, error = job
        try:
            yield from self._request_lines(who, request, body, error)
        except Exception:
            log.exception("auditing %s from %s failed", request.api.name, who[1])

    def _request_lines(
        self, who: Who, request: Request[Any], body: Any, error: MQError | None
    ) -> Iterator[str]:
        operation = AUDITED_APIS[request.api.key]
        asked = _request_topics(request.body)
        if error is not None or not isinstance(body, dict):
            name = error.name if error is not None else "ok"
            message = error.message if error is not None else None
            for topic, entry in asked.items() or [("*", None)]:
                yield self._line(who, operation, f"topic:{topic}", name, message, _details(entry))
            return
        written: set[tuple[str, str, str | None]] = set()
        skipped = 0
        for entry in body.get("topics") or ():
            result, message = _result(entry)
            key = (entry["name"], result, message)
            if key in written:  # a topic named again with the same outcome (a request
                skipped += 1  # naming one topic 20,000 times is refused each time): once
                if not skipped % LINES_PER_TURN:
                    yield ""  # no line, but a turn's worth of work: the writing task yields
                continue
            written.add(key)
            details = _details(asked.get(entry["name"]))
            yield self._line(who, operation, f"topic:{entry['name']}", result, message, details)

    def _write(self, line: str) -> None:
        if not line:
            return
        try:
            if self._file is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
                self._size = self._file.tell()
            if self._size and self._size + len(line) > self.max_bytes:
                self._rotate()
                assert self._file is not None
            self._file.write(line)
            self._file.flush()
            self._size += len(line)
        except OSError as exc:
            now = time.monotonic()
            if now - self._last_warning >= WARN_INTERVAL_S:
                self._last_warning = now
                log.warning("cannot write the audit log %s: %s", self.path, exc)

    def _rotate(self) -> None:
        """audit.log -> audit.log.1 -> ... -> audit.log.<max_files> (deleted past it)."""
        if self._file is not None:
            self._file.close()
        oldest = self.directory / f"{AUDIT_FILE}.{self.max_files}"
        oldest.unlink(missing_ok=True)
        for n in range(self.max_files - 1, 0, -1):
            older = self.directory / f"{AUDIT_FILE}.{n}"
            if older.exists():
                older.rename(self.directory / f"{AUDIT_FILE}.{n + 1}")
        self.path.rename(self.directory / f"{AUDIT_FILE}.1")
        self._file = self.path.open("a", encoding="utf-8")
        self._size = 0

    def close(self) -> None:
        """Write what waits (nothing audited is lost at a clean stop), then close."""
        if self._writer is not None:
            self._writer.cancel()
            self._writer = None
        self.drain()
        if self._file is not None:
            self._file.close()
            self._file = None


def read_audit(data_dir: Path, since_ms: int = 0) -> Iterator[dict[str, Any]]:
    """The records of a broker's audit log, oldest first, from ``since_ms`` on (lines
    that do not parse, such as a last line cut by a crash, are skipped)."""
    directory = data_dir / AUDIT_DIR
    rotated = sorted(
        (p for p in directory.glob(f"{AUDIT_FILE}.*") if p.suffix[1:].isdigit()),
        key=lambda p: -int(p.suffix[1:]),
    )
    for path in [*rotated, directory / AUDIT_FILE]:
        try:
            with path.open(encoding="utf-8") as lines:
                for line in lines:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict) and record.get("time_ms", 0) >= since_ms:
                        yield record
        except FileNotFoundError:
            continue

"""The queue commands of the CLI against a real broker: mq queue, send, receive, ack, nack.

The commands run in this process (click's CliRunner, stdin from a real file, as
``mq send`` reads the file descriptor), which is ten times quicker than starting
``mq`` for each; one test runs ``mq send`` and ``mq receive`` as processes.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from click.testing import CliRunner, Result
from mq_cli.main import main

COMMAND_TIMEOUT_S = 60
SETTLE_TIMEOUT_S = 15
"""Longest a bounded loop waits for the broker to move a message (a lease to expire...)."""
NACK_DELAY_S = 2
"""Long enough that a loaded machine still describes the nacked message before it is due."""


def mq(bootstrap: str, *args: str, stdin: bytes = b"") -> Result:
    with tempfile.TemporaryFile() as source:
        source.write(stdin)
        source.seek(0)
        result = CliRunner().invoke(main, args, input=source, env={"MQ_BOOTSTRAP": bootstrap})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback: not a clean CLI error
    return result


def ok(bootstrap: str, *args: str, stdin: bytes = b"") -> bytes:
    result = mq(bootstrap, *args, stdin=stdin)
    assert result.exit_code == 0, (args, result.stderr)
    return result.stdout_bytes


def mq_process(
    bootstrap: str, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "MQ_BOOTSTRAP": bootstrap}
    return subprocess.run(
        [sys.executable, "-m", "mq_cli.main", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def describe(bootstrap: str, name: str) -> dict[str, Any]:
    described: dict[str, Any] = json.loads(
        ok(bootstrap, "queue", "describe", name, "--format", "json")
    )
    return described


def receive(bootstrap: str, queue: str, *args: str) -> list[dict[str, Any]]:
    out = ok(bootstrap, "receive", queue, "--format", "json", *args)
    return [json.loads(line) for line in out.splitlines()]


def receive_until(bootstrap: str, queue: str, count: int, *args: str) -> list[dict[str, Any]]:
    """Receive (bounded) until ``count`` messages came."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        got += receive(bootstrap, queue, "--wait", "1", *args)
    return got


def wait_for(bootstrap: str, name: str, **expected: int) -> dict[str, Any]:
    """Describe (bounded) until the attributes have these values."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        described = describe(bootstrap, name)
        if all(described[k] == v for k, v in expected.items()) or time.monotonic() > deadline:
            assert {k: described[k] for k in expected} == expected
            return described
        time.sleep(0.2)


def test_create_list_and_describe(bootstrap: str) -> None:
    name = unique("q-create")
    created = ok(
        bootstrap,
        *("queue", "create", name, "--partitions", "2", "--visibility-timeout", "5"),
        *("--max-deliveries", "3", "--dead-letter-queue", f"{name}-dlq", "--delay", "0.5"),
        "--fifo",
    )
    assert name.encode() in created
    again = mq(bootstrap, "queue", "create", name)
    assert again.exit_code == 1
    assert "TOPIC_ALREADY_EXISTS" in again.stderr
    again_ok = ok(
        bootstrap, "queue", "create", name, "--visibility-timeout", "9", "--if-not-exists"
    )
    assert again_ok == f"queue {name} already exists\n".encode()  # its settings unchanged
    listed = ok(bootstrap, "queue", "list").decode().split()
    assert {name, f"{name}-dlq"} <= set(listed)
    described = describe(bootstrap, name)
    assert described["name"] == described["group"] == name
    assert described["partitions"] == 2
    assert described["visible"] == described["in_flight"] == described["acked"] == 0
    assert described["oldest_visible_age_s"] is None
    assert described["configs"] == {
        "queue.visibility.timeout.ms": "5000",
        "queue.max.deliveries": "3",
        "queue.dead.letter.queue": f"{name}-dlq",
        "queue.delay.ms": "500",
        "queue.fifo": "true",
        "queue.receive.max.per.sec": "0",
        "queue.max.in.flight": "0",
    }
    text = ok(bootstrap, "queue", "describe", name, "--group", "other").decode()
    assert "group other" in text
    assert "queue.fifo=true" in text


def test_send_receive_without_ack_then_ack_the_receipts(bootstrap: str) -> None:
    name = unique("q-ack")
    ok(bootstrap, "queue", "create", name)
    sent = mq_process(bootstrap, "send", name, "-k", "kk", "-H", "a=1", stdin=b"one\ntwo\nthree\n")
    assert sent.returncode == 0, sent.stderr
    assert b"3 of 3 messages sent" in sent.stderr
    received = mq_process(bootstrap, "receive", name, "--no-ack", "--wait", "5", "--format", "json")
    assert received.returncode == 0, received.stderr
    got = [json.loads(line) for line in received.stdout.splitlines()]
    got += receive_until(bootstrap, name, 3 - len(got), "--no-ack")
    assert sorted(m["body"] for m in got) == ["one", "three", "two"]
    assert all(m["key"] == "kk" and m["headers"] == {"a": "1"} for m in got)
    assert all(m["delivery_count"] == 1 for m in got)
    assert all(m["receipt"] == f"{m['partition']}:{m['offset']}:1" for m in got)
    assert describe(bootstrap, name)["in_flight"] == 3
    ok(bootstrap, "ack", name, *(m["receipt"] for m in got))
    described = describe(bootstrap, name)
    assert (described["acked"], described["in_flight"], described["visible"]) == (3, 0, 0)
    ok(bootstrap, "ack", name, got[0]["receipt"])  # a repeat succeeds (as SQS)
    stale = mq(bootstrap, "nack", name, got[0]["receipt"])  # it was acked, not released
    assert stale.exit_code == 1
    assert "no longer hold a lease" in stale.stderr
    assert len(stale.stderr.strip().splitlines()) == 1
    never = mq(bootstrap, "nack", name, "1:0:1", "--delay", "5")  # partition 1 does not exist
    assert never.exit_code == 2, never.stderr
    assert "has no partition 1" in never.stderr
    assert "lease" not in never.stderr
    never = mq(bootstrap, "nack", name, f"0:{got[0]['offset'] + 100}:1")  # past the end
    assert never.exit_code == 1
    assert "1 receipt(s) name no delivery" in never.stderr, never.stderr
    assert "lease" not in never.stderr


def test_plain_receive_prints_receipt_and_body_and_acks(bootstrap: str) -> None:
    name = unique("q-text")
    ok(bootstrap, "queue", "create", name)
    ok(bootstrap, "send", name, stdin=b"hello\n")
    out = b""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not out and time.monotonic() < deadline:
        out = ok(bootstrap, "receive", name, "--wait", "1")
    receipt, body = out.rstrip(b"\n").split(b"\t")
    assert body == b"hello"
    assert receipt.endswith(b":1")
    wait_for(bootstrap, name, acked=1, in_flight=0)


def test_binary_bodies_come_as_base64(bootstrap: str) -> None:
    name = unique("q-bin")
    ok(bootstrap, "queue", "create", name)
    ok(bootstrap, "send", name, stdin=b"\xff\xfe\n")
    [message] = receive_until(bootstrap, name, 1)
    assert "body" not in message
    assert base64.b64decode(message["body_base64"]) == b"\xff\xfe"


def test_nack_with_delay_hides_the_message_for_that_long(bootstrap: str) -> None:
    name = unique("q-nack")
    ok(bootstrap, "queue", "create", name)
    ok(bootstrap, "send", name, stdin=b"again\n")
    [first] = receive_until(bootstrap, name, 1, "--no-ack")
    nacked_at = time.monotonic()
    ok(bootstrap, "nack", name, first["receipt"], "--delay", str(NACK_DELAY_S))
    described = describe(bootstrap, name)
    assert (described["delayed"], described["visible"], described["in_flight"]) == (1, 0, 0)
    [second] = receive_until(bootstrap, name, 1)
    assert time.monotonic() - nacked_at >= NACK_DELAY_S  # not received before
    assert second["body"] == "again"
    assert second["delivery_count"] == 2


def test_filter_returns_only_matching_messages(bootstrap: str) -> None:
    name = unique("q-filter")
    ok(bootstrap, "queue", "create", name)
    ok(bootstrap, "send", name, "-H", "color=red", stdin=b"r1\nr2\n")
    ok(bootstrap, "send", name, "-H", "color=blue", stdin=b"b1\n")
    ok(bootstrap, "send", name, "-H", "color=green", stdin=b"g1\n")
    blue = receive_until(bootstrap, name, 1, "--filter", "color=blue")
    assert [m["body"] for m in blue] == ["b1"]
    rest = receive_until(bootstrap, name, 3, "-f", "color=red", "-f", "color=green")
    assert sorted(m["body"] for m in rest) == ["g1", "r1", "r2"]
    bad = mq(bootstrap, "receive", name, "--filter", "nonsense")
    assert bad.exit_code == 2
    assert "KEY=VALUE" in bad.stderr


def test_a_dedup_id_sent_twice_is_received_once(bootstrap: str) -> None:
    name = unique("q-dedup")
    ok(bootstrap, "queue", "create", name)
    ok(bootstrap, "send", name, "--dedup-id", "order-7", stdin=b"first\n")
    ok(bootstrap, "send", name, "--dedup-id", "order-7", stdin=b"second\n")
    got = receive_until(bootstrap, name, 1)
    got += receive(bootstrap, name, "--wait", "1")
    assert [m["body"] for m in got] == ["first"]
    assert describe(bootstrap, name)["deduplicated"] == 1


def test_purge_and_delete_ask_unless_yes(bootstrap: str) -> None:
    name = unique("q-purge")
    ok(bootstrap, "queue", "create", name)
    ok(bootstrap, "send", name, stdin=b"a\nb\n")
    wait_for(bootstrap, name, visible=2)
    refused = mq(bootstrap, "queue", "purge", name, stdin=b"n\n")
    assert refused.exit_code == 1
    assert describe(bootstrap, name)["visible"] == 2
    ok(bootstrap, "queue", "purge", name, "--yes")
    wait_for(bootstrap, name, visible=0)
    assert mq(bootstrap, "queue", "delete", name).exit_code == 1  # no answer: aborted
    ok(bootstrap, "queue", "delete", name, "--yes")
    assert name not in ok(bootstrap, "queue", "list").decode().split()
    gone = mq(bootstrap, "queue", "describe", name)
    assert gone.exit_code == 1
    assert "does not exist" in gone.stderr


def test_expired_messages_are_dead_lettered_and_redriven(bootstrap: str) -> None:
    name, dlq = unique("q-redrive"), unique("q-redrive-dlq")
    ok(bootstrap, "queue", "create", name, "--max-deliveries", "1", "--dead-letter-queue", dlq)
    ok(bootstrap, "send", name, stdin=b"fragile\n")
    [leased] = receive_until(bootstrap, name, 1, "--no-ack", "--visibility-timeout", "1")
    wait_for(bootstrap, dlq, visible=1)  # the lease expired after its one delivery
    assert describe(bootstrap, name)["dead_lettered"] == 1
    moved = ok(bootstrap, "queue", "redrive", dlq)
    assert moved.decode().split()[:2] == ["moved", "1"]
    assert describe(bootstrap, dlq)["visible"] == 0
    [again] = receive_until(bootstrap, name, 1)
    assert again["body"] == leased["body"] == "fragile"
    assert not any(h.startswith("mq.dlq.") for h in again["headers"])


def test_bad_input_is_one_clear_line(bootstrap: str) -> None:
    missing = unique("q-missing")
    started = time.monotonic()
    for command in (["receive", missing, "--wait", "0"], ["ack", missing, "0:0:1"]):
        failed = mq(bootstrap, *command)
        assert failed.exit_code == 1, command
        assert failed.stderr.strip() == f"Error: queue {missing!r} does not exist"
    sent = mq(bootstrap, "send", missing, stdin=b"lost\n")
    assert sent.exit_code == 1
    assert "does not exist" in sent.stderr
    assert time.monotonic() - started < 20  # no waiting for metadata to appear
    assert missing not in ok(bootstrap, "topic", "list").decode().split()  # not auto-created
    name = unique("q-bad")
    ok(bootstrap, "queue", "create", name)
    for receipt in ("1:2", "-1:0:1", "5:0:1"):  # malformed, negative, no such partition
        malformed = mq(bootstrap, "ack", name, receipt)
        assert malformed.exit_code == 2, receipt
        assert "RECEIPT" in malformed.stderr
    never = mq(bootstrap, "nack", name, "0:0:1")  # nothing sent: no such delivery
    assert never.exit_code == 1
    assert "1 receipt(s) name no delivery (0:0:1)" in never.stderr

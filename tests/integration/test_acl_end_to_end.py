"""ACLs end to end: a real ``mq serve`` with ``authorizer = "acl"``, driven by the CLI.

Until listeners authenticate, every connection is ``User:ANONYMOUS``; the test
bootstraps the broker offline (``mq acl add --data-dir``, before its first
start) with the one right an operator needs, ALTER and DESCRIBE on the
cluster, then shows that anonymous is refused what no ACL allows, with a
message naming the principal, the operation and the resource, and allowed
within a second of ``mq acl add``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from broker_process import BrokerProcess

COMMAND_TIMEOUT_S = 120
SEGMENT_BYTES = 16 << 20


def mq(
    *args: str, bootstrap: str = "", stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MQ_BOOTSTRAP": bootstrap}
    done = subprocess.run(
        [sys.executable, "-m", "mq_cli.main", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def test_anonymous_is_refused_then_allowed_by_mq_acl_add(tmp_path: Path) -> None:
    data = tmp_path / "data"
    anon = ("--principal", "User:ANONYMOUS")
    boot = mq(
        "acl",
        "add",
        "--data-dir",
        str(data),
        *anon,
        "--operation",
        "alter",
        "--operation",
        "describe",
        "--cluster",
    )
    assert boot.returncode == 0, boot.stderr
    assert "added: allow User:ANONYMOUS alter on cluster 'mq-cluster'" in boot.stdout
    broker = BrokerProcess(data, settings={"authorizer": "acl"}, segment_bytes=SEGMENT_BYTES)
    broker.start()
    try:
        b = broker.bootstrap
        # the running broker owns the embedded store: no offline change beside it
        busy = mq("acl", "list", "--data-dir", str(data))
        assert busy.returncode != 0
        assert "a broker is running" in busy.stderr

        refused = mq("topic", "create", "orders", bootstrap=b)
        assert refused.returncode != 0
        assert (
            "TOPIC_AUTHORIZATION_FAILED: User:ANONYMOUS is not authorized to CREATE topic "
            "'orders' (no ACL allows it)"
        ) in refused.stderr

        granted = mq(
            "acl",
            "add",
            *anon,
            "--operation",
            "create",
            "--operation",
            "write",
            "--topic",
            "ord",
            "--prefixed",
            bootstrap=b,
        )
        assert granted.returncode == 0, granted.stderr
        added_at = time.monotonic()
        created = mq("topic", "create", "orders", bootstrap=b)
        assert created.returncode == 0, created.stderr
        assert time.monotonic() - added_at < 1.0 + _command_cost(b)

        produced = mq("produce", "orders", bootstrap=b, stdin=b"one\ntwo\n")
        assert produced.returncode == 0, produced.stderr
        consumed = mq("consume", "orders", "--from-beginning", "--timeout", "3", bootstrap=b)
        assert consumed.returncode != 0  # READ was never granted
        assert "User:ANONYMOUS is not authorized to" in consumed.stderr

        listed = mq("acl", "list", *anon, "--topic", "ord", "--prefixed", bootstrap=b)
        assert listed.returncode == 0, listed.stderr
        rows = listed.stdout.splitlines()[1:]
        assert sorted(row.split()[2] for row in rows) == ["create", "write"]

        removed = mq(
            "acl",
            "remove",
            *anon,
            "--topic",
            "ord",
            "--prefixed",
            "--operation",
            "write",
            bootstrap=b,
        )
        assert removed.returncode == 0, removed.stderr
        assert "removed: allow User:ANONYMOUS write on topic prefixed 'ord'" in removed.stdout
        again = mq("produce", "orders", bootstrap=b, stdin=b"three\n")
        assert again.returncode != 0
        # without WRITE nothing implies DESCRIBE any more: the producer's metadata is refused
        assert "User:ANONYMOUS is not authorized to DESCRIBE topic 'orders'" in again.stderr
    finally:
        broker.stop()
    # stopped: the offline tools see what the broker stored
    offline = mq("acl", "list", "--data-dir", str(data))
    assert offline.returncode == 0, offline.stderr
    assert len(offline.stdout.splitlines()) == 1 + 3  # header, alter, describe, create


def _command_cost(bootstrap: str) -> float:
    """How long one CLI command takes here (interpreter start and a round trip): the
    bound is a second of propagation on top of running the command that observes it."""
    started = time.monotonic()
    mq("acl", "list", bootstrap=bootstrap)
    return time.monotonic() - started


def test_the_default_broker_allows_everyone_and_refuses_acl_commands(broker: BrokerProcess) -> None:
    """``mq serve`` alone: no authorization, and the ACL commands say it is off."""
    b = broker.bootstrap
    assert mq("topic", "create", "acl-free", bootstrap=b).returncode == 0
    listed = mq("acl", "list", bootstrap=b)
    assert listed.returncode != 0
    assert "SECURITY_DISABLED" in listed.stderr

"""The peer harness's parts that need no peer server: the server process, medians, rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.peers import PEERS, run_peer
from benchmarks.peers.base import NotInstalled, Server, free_port, require
from benchmarks.peers.harness import Figure, Plan, Sample
from benchmarks.peers.redis_streams import RedisStreams
from benchmarks.suite import COLUMNS, markdown, skipped, table


def test_a_server_is_waited_for_measured_and_stopped_with_its_children(tmp_path: Path) -> None:
    port = free_port()
    # a shell whose child works, then serves: the child's CPU counts, and it is stopped too
    script = (
        f"{sys.executable} -c 'import socket,time\n"
        f"sum(range(3_000_000))\n"
        f's=socket.socket(); s.bind(("127.0.0.1", {port})); s.listen()\n'
        f"time.sleep(60)' & wait"
    )
    server = Server(["sh", "-c", script], port=port, log=tmp_path / "log")
    try:
        assert server.cpu_seconds() > 0
    finally:
        server.stop()
    assert server.proc.poll() is not None
    with pytest.raises(RuntimeError, match="did not listen"):
        Server(["sh", "-c", "exit 3"], port=free_port(), log=tmp_path / "log2")


def test_a_missing_server_says_how_to_install_it() -> None:
    with pytest.raises(NotInstalled, match="apt-get install no-such-package"):
        require("no-such-binary-here", "no-such-package")


def test_figures_are_medians_in_the_suite_columns() -> None:
    figure = Figure("W1 produce", 1_000, 100)
    for seconds, server in ((1.0, 0.002), (0.5, 0.001), (2.0, 0.004)):
        figure.samples.append(Sample(seconds, server, 0.01, True))
    row = figure.row(RedisStreams("always"))
    assert set(COLUMNS) <= set(row)
    assert (row["system"], row["durability"]) == ("Redis Streams", "appendfsync always")
    assert row["msg_per_s"] == 1_000
    assert row["mb_per_s"] == 0.1
    assert row["broker_cpu_us_per_msg"] == 2.0
    assert row["p50_ms"] is None
    assert row["verified"] is True
    figure.samples.append(Sample(1.0, 0.0, 0.0, False, problem="3 of 4 confirmed"))
    assert figure.row(RedisStreams())["problem"] == "3 of 4 confirmed"
    assert figure.row(RedisStreams())["verified"] is False


def test_a_peer_that_cannot_run_gives_a_skipped_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("benchmarks.peers.base.shutil.which", lambda *_, **__: None)
    rows: list[dict[str, object]] = []
    run_peer("redis", Plan(messages=10, runs=1), rows.append)
    assert [row["skipped"] for row in rows] == [
        "redis-server not found: install it with `apt-get install redis-server`"
    ]
    assert set(PEERS) == {"redis", "nats", "rabbitmq"}
    lines = table([*rows, {**dict.fromkeys(COLUMNS), "workload": "W1 produce", "verified": True}])
    assert lines[-1].startswith("Redis Streams: skipped, redis-server not found")
    assert skipped(rows) == [lines[-1]]
    assert "redis-server not found" in markdown(rows, 3)

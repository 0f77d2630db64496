"""The client commands of the CLI against a real broker: topic, produce, consume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

COMMAND_TIMEOUT_S = 120


def mq(
    bootstrap: str, *args: str, stdin: bytes | None = None
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


def test_100000_lines_come_back_complete_and_in_order_per_key(
    bootstrap: str, tmp_path: Path
) -> None:
    assert mq(bootstrap, "topic", "create", "cli-lines", "-p", "3").returncode == 0
    lines = [f"k{i % 7},{i}" for i in range(100_000)]
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(lines) + "\n")
    produced = mq(bootstrap, "produce", "cli-lines", "--file", str(source), "-k", ",")
    assert produced.returncode == 0, produced.stderr
    assert b"100000 of 100000 messages acknowledged" in produced.stderr
    consumed = mq(
        bootstrap, "consume", "cli-lines", "--from-beginning", "--timeout", "3", "--format", "json"
    )
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted(int(r["value"]) for r in records) == list(range(100_000))
    by_partition: dict[int, list[int]] = defaultdict(list)
    by_key: dict[str, list[int]] = defaultdict(list)
    partitions_of_key: dict[str, set[int]] = defaultdict(set)
    for r in records:
        by_partition[r["partition"]].append(r["offset"])
        by_key[r["key"]].append(int(r["value"]))
        partitions_of_key[r["key"]].add(r["partition"])
    for offsets in by_partition.values():
        assert offsets == sorted(offsets)  # in order within each partition
    for key, values in by_key.items():
        assert values == sorted(values), key  # one key, one partition, sent order kept
        assert len(partitions_of_key[key]) == 1


def test_topic_commands_and_clear_errors(bootstrap: str) -> None:
    created = mq(bootstrap, "topic", "create", "cli-admin", "-p", "2", "-c", "retention.ms=60000")
    assert created.returncode == 0, created.stderr
    assert "cli-admin" in mq(bootstrap, "topic", "list").stdout.decode().split()
    again = mq(bootstrap, "topic", "create", "cli-admin", "-p", "5")
    assert again.returncode == 1
    assert b"TOPIC_ALREADY_EXISTS" in again.stderr
    again = mq(bootstrap, "topic", "create", "cli-admin", "-p", "5", "--if-not-exists")
    assert again.returncode == 0, again.stderr
    assert again.stdout == b"topic cli-admin already exists\n"
    described = mq(bootstrap, "topic", "describe", "cli-admin").stdout.decode()
    assert "retention.ms=60000" in described
    assert "retention.bytes=-1" in described  # no cap, shown as Kafka shows it
    assert "None" not in described
    assert "queue." not in described  # a plain topic: no queue settings
    capped = mq(bootstrap, "topic", "alter", "cli-admin", "-c", "retention.bytes=-1")
    assert capped.returncode == 0, capped.stderr  # -1 is accepted back
    assert mq(bootstrap, "topic", "alter", "cli-admin", "-c", "retention.ms=120000").returncode == 0
    assert "retention.ms=120000" in mq(bootstrap, "topic", "describe", "cli-admin").stdout.decode()
    missing = mq(bootstrap, "topic", "delete", "no-such-topic")
    assert missing.returncode == 1
    assert b"UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    assert b"Traceback" not in missing.stderr
    assert mq(bootstrap, "topic", "delete", "cli-admin").returncode == 0
    nosuch = mq(bootstrap, "consume", "no-such-topic", "--timeout", "2")
    assert nosuch.returncode == 1
    assert b"UNKNOWN_TOPIC_OR_PARTITION: topic 'no-such-topic' does not exist" in nosuch.stderr
    assert b"Traceback" not in nosuch.stderr
    unreachable = mq("127.0.0.1:1", "topic", "list")
    assert unreachable.returncode != 0
    assert b"Traceback" not in unreachable.stderr


def test_produce_from_stdin_and_consume_as_a_group(bootstrap: str) -> None:
    assert mq(bootstrap, "topic", "create", "cli-group").returncode == 0
    sent = mq(bootstrap, "produce", "cli-group", "-H", "source=test", stdin=b"one\ntwo\nthree")
    assert sent.returncode == 0, sent.stderr
    first = mq(bootstrap, "consume", "cli-group", "-g", "readers", "--from-beginning", "-n", "2")
    assert first.stdout == b"one\ntwo\n", first.stderr
    rest = mq(
        bootstrap, "consume", "cli-group", "-g", "readers", "--timeout", "2", "--format", "json"
    )
    records = [json.loads(line) for line in rest.stdout.splitlines()]
    assert [r["value"] for r in records] == ["three"]  # the group resumed after its commit
    assert records[0]["headers"] == [["source", "test"]]


def test_group_list_describe_and_reset_offsets(bootstrap: str) -> None:
    assert mq(bootstrap, "topic", "create", "cli-lag", "-p", "2").returncode == 0
    lines = b"".join(b"m%d\n" % i for i in range(10))
    assert mq(bootstrap, "produce", "cli-lag", stdin=lines).returncode == 0
    read = mq(bootstrap, "consume", "cli-lag", "-g", "laggers", "--from-beginning", "-n", "10")
    assert len(read.stdout.splitlines()) == 10, read.stderr
    listed = mq(bootstrap, "group", "list").stdout.decode()
    assert "laggers" in listed
    described = mq(bootstrap, "group", "describe", "laggers").stdout.decode()
    rows = [line.split() for line in described.splitlines() if line.startswith("cli-lag")]
    assert len(rows) == 2
    assert all(row[4] == "0" for row in rows)  # lag 0 after reading everything
    reset = mq(
        bootstrap, "group", "reset-offsets", "laggers", "--topic", "cli-lag", "--to-earliest"
    )
    assert reset.returncode == 0, reset.stderr
    described = mq(bootstrap, "group", "describe", "laggers").stdout.decode()
    rows = [line.split() for line in described.splitlines() if line.startswith("cli-lag")]
    assert sum(int(row[4]) for row in rows) == 10  # everything is to be read again
    again = mq(bootstrap, "consume", "cli-lag", "-g", "laggers", "--timeout", "2")
    assert len(again.stdout.splitlines()) == 10
    usage = mq(bootstrap, "group", "reset-offsets", "laggers", "--topic", "cli-lag")
    assert usage.returncode == 2


def test_bad_topic_names_get_a_topic_name_error(bootstrap: str) -> None:
    for name in ("", "x" * 300, "a b"):
        commands = [
            ("topic", "create", name),
            ("queue", "create", name),
            ("consume", name, "--timeout", "1"),
        ]
        for args in commands:
            failed = mq(bootstrap, *args)
            assert failed.returncode == 1, (args, failed.stderr)
            assert failed.stderr.startswith(b"Error: INVALID_TOPIC_EXCEPTION: ")
            assert b"1 to 249 characters from ASCII letters, digits" in failed.stderr

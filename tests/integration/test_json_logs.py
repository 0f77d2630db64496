"""``mq serve --log-format json`` (the ``log_format`` key) on a real broker (issue 21):
every log line is a JSON object with the stable fields, and lines about one partition
carry its topic and partition."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, LocalClusterError

import mq

FIELDS = {"time", "level", "logger", "broker", "topic", "partition", "message"}
WAIT_S = 60.0


def json_lines(process: BrokerProcess) -> list[dict[str, Any]]:
    """The broker's log lines (the ``mq ...`` lines that scripts wait for are not logs)."""
    return [json.loads(line) for line in process.output if line.startswith("{")]


def test_json_logs_carry_the_stable_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQ_BROKER_VERBOSE", "1")  # info lines
    process = BrokerProcess(
        tmp_path / "data", segment_bytes=16 << 20, node_id=7, settings={"log_format": "json"}
    )
    process.start()
    try:

        async def work() -> None:
            async with mq.Admin(bootstrap=process.bootstrap) as admin:
                await admin.create_topic("logged", partitions=2)
                await admin.delete_topic("logged")

        asyncio.run(work())
        deadline = time.monotonic() + WAIT_S
        about = []
        while len(about) < 2 and time.monotonic() < deadline:
            about = [r for r in json_lines(process) if r["topic"] == "logged"]
            time.sleep(0.1)
    finally:
        process.stop()
    lines = json_lines(process)
    assert lines, process.output
    # every line that is not one of the CLI's own status lines is JSON
    others = [line for line in process.output if not line.startswith(("{", "mq "))]
    assert others == []
    for record in lines:
        assert set(record) >= FIELDS
        assert record["broker"] == 7
        assert record["time"].endswith("Z")
        assert record["level"] in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
        assert record["logger"].startswith("mq")
    assert sorted(r["partition"] for r in about) == [0, 1]
    assert all("logged-" in r["message"] for r in about)


def test_a_bad_log_format_is_refused(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", settings={"log_format": "xml"})
    with pytest.raises(LocalClusterError, match="log_format must be text or json"):
        process.start()

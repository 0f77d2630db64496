"""The audit log of a real broker process (issue 21): every admin request a client makes
is one record per topic, with who, from where, what and how it ended, including
requests that failed or that the gate refused; ``mq audit`` shows them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess

import mq
from mq.errors import TopicAlreadyExistsError, TopicAuthorizationFailedError

CLI_TIMEOUT_S = 60


def audit_cli(data_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mq_cli.main", "audit", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=True,
    )
    return done.stdout


def records(data_dir: Path, *args: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in audit_cli(data_dir, "--json", *args).splitlines()]


def test_admin_operations_are_audited(own_broker: BrokerProcess) -> None:
    topic = f"audited-{uuid.uuid4().hex[:8]}"

    async def admin_work() -> None:
        async with mq.Admin(bootstrap=own_broker.bootstrap, client_id="ops-tool") as admin:
            await admin.create_topic(topic, partitions=2, configs={"retention.ms": "60000"})
            with pytest.raises(TopicAlreadyExistsError):
                await admin.create_topic(topic, partitions=2)
            await admin.alter_configs(topic, {"retention.ms": "120000"})
            async with mq.Producer(bootstrap=own_broker.bootstrap) as producer:
                await producer.send_and_wait(topic, b"x", partition=0)
            await admin.delete_records({mq.TopicPartition(topic, 0): -1})
            with pytest.raises(TopicAuthorizationFailedError):  # refused at the gate
                await admin.alter_configs("__consumer_offsets", {"retention.ms": "1"})
            await admin.delete_topic(topic)

    asyncio.run(admin_work())
    found = records(own_broker.data_dir)
    ours = [r for r in found if r["client_id"] == "ops-tool"]
    summary = [(r["operation"], r["resource"], r["result"]) for r in ours]
    assert summary == [
        ("create_topics", f"topic:{topic}", "ok"),
        ("create_topics", f"topic:{topic}", "TOPIC_ALREADY_EXISTS"),
        ("alter_configs", f"topic:{topic}", "ok"),
        ("delete_records", f"topic:{topic}", "ok"),
        ("alter_configs", "topic:__consumer_offsets", "TOPIC_AUTHORIZATION_FAILED"),
        ("delete_topics", f"topic:{topic}", "ok"),
    ]
    created = ours[0]
    assert created["principal"] == "User:ANONYMOUS"
    assert created["client_address"].startswith("127.0.0.1:")
    assert created["broker"] == 0
    assert created["details"]["partitions"] == 2
    assert created["details"]["configs"] == {"retention.ms": "60000"}
    assert ours[1]["message"]  # the error's message is kept
    assert ours[2]["details"]["configs"] == {"retention.ms": "120000"}
    assert all(r["time"].endswith("Z") and r["time_ms"] > 0 for r in ours)
    # the broker's own requests (auto-created internal topics) are not audited as clients'
    assert all(r["client_address"] != "?" for r in found)

    # --since and --operation filter; the text form has one line per record
    assert records(own_broker.data_dir, "--since", "2099-01-01T00:00:00Z") == []
    deleted = records(own_broker.data_dir, "--operation", "delete_topics", "--since", "1h")
    assert [r["resource"] for r in deleted if r["client_id"] == "ops-tool"] == [f"topic:{topic}"]
    text = audit_cli(own_broker.data_dir, "--operation", "create_topics").splitlines()
    assert any(f"create_topics topic:{topic} TOPIC_ALREADY_EXISTS" in line for line in text)


def test_audit_rejects_a_bad_since(own_broker: BrokerProcess) -> None:
    args = ["audit", "--data-dir", str(own_broker.data_dir), "--since", "yesterday"]
    done = subprocess.run(
        [sys.executable, "-m", "mq_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )
    assert done.returncode == 2
    assert "neither a duration" in done.stderr

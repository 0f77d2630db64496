"""``mq cluster status`` rendering on hand-made metadata: healthy, under-replicated, offline."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest
from mq_cli.cluster import cluster_status, read_node_config, status_lines, table_lines

from mq.errors import LeaderNotAvailableError
from mq.local_cluster import broker_config_text


def _broker(node_id: int) -> dict[str, Any]:
    return {"node_id": node_id, "host": "127.0.0.1", "port": 9290 + node_id, "rack": None}


def _partition(
    partition: int,
    leader: int,
    replicas: list[int],
    isr: list[int],
    *,
    error: int = 0,
    offline_replicas: list[int] | None = None,
) -> dict[str, Any]:
    return {
        "partition": partition,
        "error": error,
        "leader": leader,
        "leader_epoch": 3,
        "replicas": replicas,
        "isr": isr,
        "offline_replicas": offline_replicas or [],
    }


def _metadata(*topics: dict[str, Any], controller: int = 1, nodes: int = 3) -> dict[str, Any]:
    return {
        "cluster_id": "c-1",
        "controller_id": controller,
        "brokers": [_broker(n) for n in range(nodes, 0, -1)],  # unsorted on purpose
        "topics": list(topics),
    }


def _topic(name: str, *partitions: dict[str, Any], internal: bool = False) -> dict[str, Any]:
    return {"name": name, "error": 0, "internal": internal, "partitions": list(partitions)}


HEALTHY = _metadata(
    _topic(
        "events", _partition(1, 2, [2, 3, 1], [2, 3, 1]), _partition(0, 1, [1, 2, 3], [1, 2, 3])
    ),
    _topic("__consumer_offsets", _partition(0, 3, [3, 1, 2], [3, 1, 2]), internal=True),
)

DEGRADED = _metadata(
    _topic(
        "events",
        _partition(0, 1, [1, 2, 3], [1, 2, 3]),
        _partition(1, 2, [2, 3, 1], [2, 1], offline_replicas=[3]),
        _partition(2, -1, [3], [3], error=LeaderNotAvailableError.code, offline_replicas=[3]),
    ),
    _topic("logs", _partition(0, 1, [1, 3], [1])),
    nodes=2,
)


def test_a_healthy_cluster() -> None:
    status = cluster_status(HEALTHY)
    assert status["cluster_id"] == "c-1"
    assert status["controller_id"] == 1
    assert [b["node_id"] for b in status["brokers"]] == [1, 2, 3]
    assert [b["controller"] for b in status["brokers"]] == [True, False, False]
    assert [t["name"] for t in status["topics"]] == ["__consumer_offsets", "events"]
    events = status["topics"][1]
    assert [p["partition"] for p in events["partitions"]] == [0, 1]
    assert events["partitions"][1] == {
        "partition": 1,
        "leader": 2,
        "leader_epoch": 3,
        "replicas": [2, 3, 1],
        "isr": [2, 3, 1],
        "offline_replicas": [],
        "under_replicated": False,
        "offline": False,
        "error": None,
    }
    assert status["under_replicated"] == []
    assert status["offline"] == []
    assert status["summary"] == {
        "brokers": 3,
        "topics": 2,
        "partitions": 3,
        "under_replicated": 0,
        "offline": 0,
    }
    json.dumps(status)  # what --json prints


def test_healthy_text() -> None:
    lines = status_lines(cluster_status(HEALTHY))
    assert lines[0] == "cluster c-1"
    assert lines[1] == "controller: node 1 (127.0.0.1:9291)"
    assert "brokers (3):" in lines
    broker_lines = [line for line in lines if line.startswith("  ") and "127.0.0.1:929" in line]
    assert len(broker_lines) == 3
    assert broker_lines[0].split() == ["1", "127.0.0.1:9291", "-", "-", "controller"]
    assert broker_lines[1].split() == ["2", "127.0.0.1:9292", "-", "-"]
    rows = {tuple(line.split()[:3]) for line in lines}
    assert ("events", "0", "1") in rows
    assert ("events", "1", "2") in rows
    assert any(line.split()[:2] == ["__consumer_offsets", "(internal)"] for line in lines)
    assert all(line.split()[-1] == "ok" for line in lines if line.startswith("events "))
    assert lines[-1] == "2 topics, 3 partitions: 0 under-replicated, 0 offline"


def test_each_brokers_http_listener_is_listed() -> None:
    """Brokers that register an HTTP listener show its URL (issue 21); the others, and
    the answers of brokers that do not say (no ``http`` key), show none."""
    metadata = _metadata(nodes=3)
    metadata["brokers"][0]["http"] = {"host": "127.0.0.1", "port": 8083, "scheme": "http"}
    metadata["brokers"][1]["http"] = None
    status = cluster_status(metadata)
    assert [b["http_url"] for b in status["brokers"]] == [None, None, "http://127.0.0.1:8083"]
    json.dumps(status)
    lines = status_lines(status)
    assert any(line.split()[:2] == ["NODE", "ADDRESS"] and "HTTP" in line for line in lines)
    broker_lines = [line for line in lines if line.startswith("  ") and "127.0.0.1:929" in line]
    assert broker_lines[2].split() == ["3", "127.0.0.1:9293", "http://127.0.0.1:8083", "-"]


def test_under_replicated_and_offline_partitions() -> None:
    status = cluster_status(DEGRADED)
    assert status["under_replicated"] == [
        {"topic": "events", "partition": 1},
        {"topic": "logs", "partition": 0},
    ]
    assert status["offline"] == [{"topic": "events", "partition": 2}]
    events = {p["partition"]: p for p in status["topics"][0]["partitions"]}
    assert events[0]["under_replicated"] is False
    assert events[0]["offline"] is False
    assert events[1]["under_replicated"] is True
    assert events[1]["offline_replicas"] == [3]
    # an offline partition is counted as offline only, whatever its ISR
    assert events[2]["offline"] is True
    assert events[2]["under_replicated"] is False
    assert events[2]["leader"] is None
    assert events[2]["error"] == "LEADER_NOT_AVAILABLE"
    assert status["summary"]["under_replicated"] == 2
    assert status["summary"]["offline"] == 1
    assert status["summary"]["brokers"] == 2


def test_degraded_text() -> None:
    lines = status_lines(cluster_status(DEGRADED))
    rows = {(r[0], r[1]): r for r in (line.split() for line in lines) if len(r) >= 7}
    assert rows[("events", "1")][2:] == ["2", "3", "2,3,1", "2,1", "under-replicated"]
    assert rows[("events", "2")][2:] == ["none", "3", "3", "3", "offline", "(LEADER_NOT_AVAILABLE)"]
    assert rows[("logs", "0")][-1] == "under-replicated"
    assert lines[-3:] == [
        "2 topics, 4 partitions: 2 under-replicated, 1 offline",
        "under-replicated: events-1, logs-0",
        "offline: events-2",
    ]


def test_no_controller_no_topics_and_a_topic_error() -> None:
    metadata = _metadata(controller=-1)
    status = cluster_status(metadata)
    assert status["controller_id"] is None
    assert not any(b["controller"] for b in status["brokers"])
    lines = status_lines(status)
    assert lines[1] == "controller: none"
    assert "no topics" in lines

    gone = {"name": "doomed", "error": 3, "internal": False, "partitions": []}
    lines = status_lines(cluster_status(_metadata(gone, controller=7)))
    assert lines[1] == "controller: node 7 (not among the brokers)"
    assert any(
        line.split() == ["doomed", "-", "-", "-", "-", "-", "UNKNOWN_TOPIC_OR_PARTITION"]
        for line in lines
    )


def test_table_lines_align_columns() -> None:
    assert table_lines([[1, "a"], [100, "bb"]], ["N", "X"]) == ["N    X", "1    a", "100  bb"]


# -- the broker config a local cluster writes, and `mq cluster up --config` ----------------------


def test_broker_config_text_is_toml_of_every_value_kind() -> None:
    text = broker_config_text(
        {"auto_create_topics": False, "default_replication_factor": 3, "name": 'a "b"'},
        {"segment.bytes": 1 << 20, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.5},
    )
    assert tomllib.loads(text) == {
        "auto_create_topics": False,
        "default_replication_factor": 3,
        "name": 'a "b"',
        "log": {
            "segment.bytes": 1 << 20,
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": 0.5,
        },
    }


def test_up_config_refuses_per_node_keys(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('min_insync_replicas = 2\n[log]\n"retention.ms" = 1000\n')
    assert read_node_config(good) == ({"min_insync_replicas": 2}, {"retention.ms": 1000})
    bad = tmp_path / "bad.toml"
    bad.write_text("port = 9000\nnode_id = 2\n")
    with pytest.raises(click.BadParameter, match=r"\['node_id', 'port'\]"):
        read_node_config(bad)

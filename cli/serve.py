"""``mq serve``: run a broker in the foreground until SIGTERM or SIGINT.

With no options it is the embedded default: one node, data in ``./mq-data``,
listening on 127.0.0.1:9292, no etcd and no configuration file. ``--listener``
(repeatable) replaces that listener with secured ones (:mod:`mq.broker.listeners`);
each is printed as ``mq listener NAME on HOST:PORT`` before the line below. With
``--metadata etcd://HOST:PORT --node-id N`` it joins a replicated cluster. On a signal it
stops accepting, finishes in-flight appends, syncs and closes every segment.
Once listening it prints ``mq listening on HOST:PORT`` (with the real port
when ``--port 0`` asked for a free one), which scripts and tests wait for; with
``--http-port`` it prints ``mq HTTP listening on HOST:PORT`` just before it.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import click
import uvloop

from mq import interpreter
from mq.allocator import keep_freed_memory
from mq.broker.broker import Broker
from mq.broker.config import DEFAULT_PORT, BrokerConfig
from mq.broker.server import Server
from mq.errors import MQError
from mq.logs import use_json_logs


@click.command()
@click.option("--data-dir", type=click.Path(path_type=Path), help="Where logs live [./mq-data].")
@click.option("--host", help="Address to listen on [127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), help=f"Port [{DEFAULT_PORT}]; 0 picks one.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A TOML file of broker settings (flags win over it).",
)
@click.option(
    "--metadata",
    metavar="etcd://HOST:PORT",
    help="Join the cluster whose metadata is in this etcd [none: a single node].",
)
@click.option(
    "--node-id", type=click.IntRange(0, 2**31 - 1), help="This broker's id in the cluster [0]."
)
@click.option(
    "--encryption-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Encrypt record batches at rest with this key file's newest key [none].",
)
@click.option(
    "--http-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics, /healthz, /readyz and the console on this port [off]; 0 picks one.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    help="Log lines as text or as JSON objects with stable fields [text].",
)
@click.option(
    "--listener",
    "listeners",
    multiple=True,
    metavar="SCHEME://HOST:PORT",
    help="A listener (repeatable): plaintext, ssl, sasl_plaintext or sasl_ssl; given, "
    "--host and --port are not used [plaintext on --host/--port].",
)
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="PEM chain.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="PEM key.")
@click.option(
    "--tls-client-ca",
    type=click.Path(exists=True, dir_okay=False),
    help="Require client certificates from this CA (mutual TLS).",
)
@click.option(
    "--insecure",
    is_flag=True,
    default=None,
    help="Allow a non-loopback listener without TLS and authentication.",
)
@click.option(
    "--authorizer",
    type=click.Choice(["auto", "acl", "none"]),
    help="acl: check every request against the ACLs; none: allow all [auto].",
)
@click.option(
    "--super-user",
    "super_users",
    multiple=True,
    metavar="NAME",
    help="A user the ACLs do not apply to (repeatable; adds to the config's super_users).",
)
def serve(
    data_dir: Path | None,
    host: str | None,
    port: int | None,
    config_file: Path | None,
    metadata: str | None,
    node_id: int | None,
    encryption_key_file: Path | None,
    http_port: int | None,
    log_format: str | None,
    listeners: tuple[str, ...],
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    insecure: bool | None,
    authorizer: str | None,
    super_users: tuple[str, ...],
) -> None:
    """Run a broker (a single node with the embedded defaults unless told otherwise)."""
    flags = {
        "data_dir": data_dir,
        "host": host,
        "port": port,
        "metadata": metadata,
        "node_id": node_id,
        "encryption_key_file": encryption_key_file,
        "http_port": http_port,
        "log_format": log_format,
        "listeners": listeners or None,
        "tls_cert": tls_cert,
        "tls_key": tls_key,
        "tls_client_ca": tls_client_ca,
        "insecure": True if insecure else None,
        "authorizer": authorizer,
    }
    try:
        if config_file is not None:
            config = BrokerConfig.from_file(config_file, **flags)
        else:
            config = BrokerConfig().with_overrides(**flags)
        if config.log_format == "json":
            use_json_logs(config.node_id)
        if super_users:  # issue 19: the flag adds to the file's list
            config = config.with_overrides(super_users=(*config.super_users, *super_users))
        if config.malloc_trim_bytes:
            keep_freed_memory(config.malloc_trim_bytes)
        uvloop.run(_run(config))
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"cannot serve: {exc}") from exc


async def _run(config: BrokerConfig) -> None:
    broker = Broker(config)
    server = Server(broker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, broker.reload_keys)  # encryption keys (issue 19)
    try:
        host, port = await server.start()
    except BaseException:
        await server.stop()
        raise
    if server.http is not None:  # before the line below, which scripts wait for
        click.echo(f"mq HTTP listening on {server.http.host}:{server.http.port}", err=True)
    if config.listeners:  # before the "listening" line scripts wait for
        for name, (lhost, lport) in server.bound.items():
            click.echo(f"mq listener {name} on {lhost}:{lport}", err=True)
    # the start-up heap frozen, full collections rarer, shorter GIL turns
    interpreter.settle(config.gc_full_collection_every, config.gil_switch_interval_us)
    click.echo(f"mq listening on {host}:{port} (data in {config.data_dir})", err=True)
    try:
        await stop.wait()
    finally:
        click.echo("mq shutting down", err=True)
        await server.stop()

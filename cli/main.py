"""The ``mq`` command: one click group assembling subcommands that live in their own modules.

Each area of the command line is a module with its own group or command
(:mod:`cli.storage` holds the storage admin tools); this module only sets up
what every command shares, ``--version`` and ``-v`` logging, and names them.
A subcommand's module is imported only when that subcommand runs (or its help
is asked for): ``mq --help`` and ``mq topic --help`` load click and little
else, not the broker, uvloop or the client (``benchmarks/cli_startup.py``).
The console script ``mq`` (see ``setup.cfg``) and ``python -m mq_cli.main`` both
run :func:`main`.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import click

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

COMMANDS: dict[str, tuple[str, str]] = {
    "ack": ("queue", "Ack messages: done, deleted."),
    "audit": ("audit", "Show the broker's audit log of admin operations, oldest first."),
    "acl": ("acl", "Manage ACLs: who may do what on which topic, group, queue or..."),
    "chaos": ("chaos", "Fault injection: run workloads against a local cluster under..."),
    "cluster": ("cluster", "Run a local cluster; inspect a cluster."),
    "consume": ("consume", "Print messages of TOPIC until --max-messages, --timeout or..."),
    "group": ("group", "Inspect consumer groups."),
    "nack": ("queue", "Nack messages: delivered again after --delay (or dead-lettered)."),
    "produce": ("produce", "Send one message per line of stdin (or --file) to TOPIC."),
    "queue": ("queue", "Manage queues: topics read by share groups, with leases and..."),
    "quota": ("quota", "Manage client quotas (per user, client id, or both)."),
    "receive": ("queue", "Receive up to --max-messages messages from QUEUE and print them."),
    "send": ("queue", "Send one message per line of stdin to QUEUE (all lines at once)."),
    "serve": ("serve", "Run a broker (a single node with the embedded defaults unless..."),
    "storage": ("storage", "Inspect and check log files on disk (the broker need not run)."),
    "topic": ("topic", "Manage topics."),
    "user": ("user", "Manage SASL/SCRAM users: online through a broker, or offline..."),
}
"""Subcommand -> (the module of this package defining it, its short help for ``mq --help``).
The short help is the command's own, as click would shorten it: a unit test holds them
equal, so ``mq --help`` can list the commands without importing them."""


class LazyGroup(click.Group):
    """A group whose subcommands are imported from their modules on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in COMMANDS:
            return found
        module = importlib.import_module(f"{__package__}.{COMMANDS[cmd_name][0]}")
        command: click.Command = getattr(module, cmd_name)
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help`` from :data:`COMMANDS`, without importing them."""
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class _ClickHandler(logging.Handler):
    """Writes log lines through click to whatever stderr is current (as CliRunner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(self.format(record), err=True)
        except Exception:
            self.handleError(record)


def configure_logging(verbose: int) -> None:
    """Warnings by default, info with ``-v``, debug with ``-vv``; idempotent."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _ClickHandler)]:
        root.removeHandler(handler)
    handler = _ClickHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)


def _print_version(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if not value or ctx.resilient_parsing:
        return
    import mq

    click.echo(f"mq, version {mq.__version__}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@click.option("-v", "--verbose", count=True, help="Log more: -v for info, -vv for debug.")
def main(verbose: int) -> None:
    """mq: a durable, replicated message queue and log broker."""
    configure_logging(verbose)


if __name__ == "__main__":
    main()

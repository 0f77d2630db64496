"""The ``mq`` command: one click group assembling subcommands that live in their own modules.

Each area of the command line is a module with its own group or command
(:mod:`cli.storage` holds the storage admin tools); this module only sets up
what every command shares, ``--version`` and ``-v`` logging, and adds them.
The console script ``mq`` (see ``setup.cfg``) and ``python -m mq_cli.main`` both
run :func:`main`.
"""

from __future__ import annotations

import importlib
import logging
from typing import ClassVar

import click

import mq

from .cluster import cluster
from .consume import consume
from .group import group
from .produce import produce
from .queue import ack, nack, queue, receive, send
from .rebalance import rebalance
from .serve import serve
from .storage import storage
from .topic import topic

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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


class _LazyGroup(click.Group):
    """A group whose heavier subcommands are imported only when used (``mq chaos``)."""

    LAZY: ClassVar[dict[str, tuple[str, str]]] = {"chaos": ("chaos", "chaos")}
    """name -> (module of this package, attribute)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY:
            module, attribute = self.LAZY[cmd_name]
            command: click.Command = getattr(
                importlib.import_module(f".{module}", __package__), attribute
            )
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(mq.__version__, "-V", "--version", prog_name="mq")
@click.option("-v", "--verbose", count=True, help="Log more: -v for info, -vv for debug.")
def main(verbose: int) -> None:
    """mq: a durable, replicated message queue and log broker."""
    configure_logging(verbose)


main.add_command(serve)
main.add_command(topic)
main.add_command(produce)
main.add_command(consume)
main.add_command(group)
main.add_command(queue)
main.add_command(send)
main.add_command(receive)
main.add_command(ack)
main.add_command(nack)
main.add_command(storage)
cluster.add_command(rebalance)
main.add_command(cluster)


if __name__ == "__main__":
    main()

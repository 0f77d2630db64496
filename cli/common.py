"""What every client command shares: the bootstrap option, config pairs, error handling.

Client commands use only the public client API (:mod:`mq`). Errors become one
line on stderr and a non-zero exit (click's ``ClickException``), never a
traceback; Ctrl-C exits with 130 as shells expect.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from mq.errors import MQError

T = TypeVar("T")

BOOTSTRAP_ENV = "MQ_BOOTSTRAP"
DEFAULT_BOOTSTRAP = "127.0.0.1:9292"

bootstrap_option = click.option(
    "-b",
    "--bootstrap",
    envvar=BOOTSTRAP_ENV,
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    help=f"Broker address HOST:PORT[,HOST:PORT] (env {BOOTSTRAP_ENV}).",
)


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on uvloop, turning mq and OS errors into one-line CLI errors."""
    import uvloop  # here, not at the top: ``--help`` does not load asyncio

    try:
        return uvloop.run(main())
    except MQError as exc:
        raise click.ClickException(f"{exc.name}: {exc.message}") from exc
    except OSError as exc:
        raise click.ClickException(f"cannot reach the broker: {exc}") from exc
    except KeyboardInterrupt:
        sys.exit(130)


def parse_pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    """``("k=v", ...)`` as a dict; a clear usage error for an item without '='."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=what)
        pairs[key] = value
    return pairs


def echo_table(rows: list[list[Any]], headers: list[str]) -> None:
    """Print aligned columns."""
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())

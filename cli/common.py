"""What every client command shares: the bootstrap option, config pairs, error handling.

Client commands use only the public client API (:mod:`mq`). Errors become one
line on stderr and a non-zero exit (click's ``ClickException``), never a
traceback; Ctrl-C exits with 130 as shells expect.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from mq.errors import MQError

T = TypeVar("T")

BOOTSTRAP_ENV = "MQ_BOOTSTRAP"
DEFAULT_BOOTSTRAP = "127.0.0.1:9292"

COMMAND_CONFIG_ENV = "MQ_COMMAND_CONFIG"
PASSWORD_ENV = "MQ_SASL_PASSWORD"
SECURITY_KEYS = frozenset(
    {
        "security_protocol",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "ssl_cafile",
        "ssl_certfile",
        "ssl_keyfile",
    }
)
"""The keys of a ``--command-config`` file: the clients' own keyword names."""
_META = "mq.security"

_bootstrap = click.option(
    "-b",
    "--bootstrap",
    envvar=BOOTSTRAP_ENV,
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    help=f"Broker address HOST:PORT[,HOST:PORT] (env {BOOTSTRAP_ENV}).",
)


def _load_command_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    import tomllib

    try:
        with open(value, "rb") as file:
            options = tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(f"{value}: {exc}", param=param) from exc
    unknown = set(options) - SECURITY_KEYS
    if unknown:
        raise click.BadParameter(
            f"{value}: unknown keys {sorted(unknown)} (known: {sorted(SECURITY_KEYS)})",
            param=param,
        )
    ctx.meta[_META] = options


_command_config = click.option(
    "--command-config",
    envvar=COMMAND_CONFIG_ENV,
    type=click.Path(exists=True, dir_okay=False),
    expose_value=False,
    callback=_load_command_config,
    help="A TOML file of connection security settings (security_protocol, sasl_mechanism, "
    f"sasl_plain_username, sasl_plain_password, ssl_cafile...; env {COMMAND_CONFIG_ENV}). "
    f"The password may come from env {PASSWORD_ENV} instead.",
)


def bootstrap_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--bootstrap`` and ``--command-config`` (what every connecting command takes)."""
    return _bootstrap(_command_config(command))


def security() -> dict[str, Any]:
    """The client keywords of ``--command-config`` (and the password from the
    environment), for the command being run: ``mq.Admin(bootstrap, **security())``."""
    ctx = click.get_current_context(silent=True)
    options: dict[str, Any] = dict(ctx.meta.get(_META, {})) if ctx is not None else {}
    protocol = str(options.get("security_protocol", "PLAINTEXT")).upper()
    if protocol.startswith("SASL_") and "sasl_plain_password" not in options:
        password = os.environ.get(PASSWORD_ENV)
        if password is not None:
            options["sasl_plain_password"] = password
    return options


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

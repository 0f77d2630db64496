"""``mq audit``: show a broker's audit log (who changed what, from where, how it ended).

Reads ``<data-dir>/audit/audit.log`` and its rotated files (:mod:`mq.broker.audit`)
on the broker's host; the broker need not run. ``--since`` takes a duration back
from now (``90s``, ``15m``, ``2h``, ``7d``) or an ISO-8601 time.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import click

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def since_ms(text: str, now_s: float) -> int:
    """The epoch milliseconds ``--since`` names (a duration back from ``now_s`` or a time)."""
    found = _DURATION.match(text.strip())
    if found:
        return int((now_s - float(found.group(1)) * _UNIT_S[found.group(2)]) * 1000)
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither a duration (90s, 15m, 2h, 7d) nor an ISO-8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("mq-data"),
    show_default=True,
    help="The broker's data directory.",
)
@click.option("--since", help="Only records from then on: 15m, 2h, 7d or an ISO-8601 time.")
@click.option("--operation", help="Only this operation (create_topics, delete_topics, ...).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, as stored.")
def audit(data_dir: Path, since: str | None, operation: str | None, as_json: bool) -> None:
    """Show the broker's audit log of admin operations, oldest first."""
    from mq.broker.audit import read_audit

    start = since_ms(since, time.time()) if since else 0
    for record in read_audit(data_dir, start):
        if operation is not None and record.get("operation") != operation:
            continue
        if as_json:
            click.echo(json.dumps(record, separators=(",", ":")))
            continue
        message = f" ({record['message']})" if record.get("message") else ""
        click.echo(
            f"{record.get('time')} {record.get('principal')} {record.get('client_address')} "
            f"{record.get('client_id') or '-'} {record.get('operation')} "
            f"{record.get('resource')} {record.get('result')}{message}"
        )

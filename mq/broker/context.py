"""What every handler knows about the request it serves besides its body."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mq.errors import MQError

ANONYMOUS = "User:ANONYMOUS"


@dataclass
class RequestContext:
    """The connection's identity, shared by the requests it carries.

    ``principal`` is anonymous until the connection authenticates; every
    handler receives it, so authorization can be added without touching the
    handlers' signatures.
    """

    connection_id: int
    peer: str
    client_id: str | None = None
    principal: str = ANONYMOUS
    closing: bool = field(default=False)
    """Set when the connection closes: long polls stop waiting."""


def set_error(result: Any, exc: MQError) -> None:
    """Put an error on a per-topic or per-partition result (all have these two keys)."""
    result["error"] = exc.code
    result["message"] = exc.message

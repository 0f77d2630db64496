"""What every handler knows about the request it serves besides its body."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mq.errors import MQError

if TYPE_CHECKING:
    from mq.broker.partition import Partition

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


def by_topic(
    topics: Iterable[Mapping[str, Any]], results: Mapping[tuple[str, int], Any]
) -> list[dict[str, Any]]:
    """Per-partition results grouped back into the request's topics, in its order."""
    return [
        {
            "name": topic["name"],
            "partitions": [results[(topic["name"], p["partition"])] for p in topic["partitions"]],
        }
        for topic in topics
    ]


async def wait_for_any(partitions: Iterable[Partition], timeout_s: float) -> bool:
    """Wait (up to ``timeout_s``) for an append or a high-watermark move on any partition
    still led here; False at once if there is none to wait on (a long poll's step)."""
    waiters = [p.wait_for_data() for p in partitions if p.is_leader]
    if not waiters:
        return False
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return True

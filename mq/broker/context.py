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
    broker_id: int | None = None
    """Set when the connection proved it is a broker of this cluster
    (``broker_hello``, :mod:`mq.broker.gate`): the broker-only APIs are served to it."""
    # -- identity (issue 19, mq.broker.listeners / mq.broker.sasl) --------------------
    listener: str = "PLAINTEXT"
    """The name of the listener the connection came in through: ``PLAINTEXT``, ``SSL``,
    ``SASL_PLAINTEXT`` or ``SASL_SSL`` (its security protocol, Kafka's names)."""
    authenticates: bool = False
    """Whether that listener authenticates its clients (SASL, or TLS with required
    client certificates): then ``principal`` is a proven identity once
    ``authenticated``, and a SASL connection reaches the gate's authorization only
    after it authenticated (:func:`mq.broker.sasl.admit`)."""
    authenticated: bool = False
    """The connection proved who it is (SASL completed, or a verified client
    certificate mapped to ``principal``)."""
    sasl: Any = None
    """The SASL exchange in progress (:class:`mq.broker.sasl.SaslSession`)."""
    disconnect: str | None = None
    """Set by the gate or a handler: close the connection after this response (why)."""
    closing: bool = field(default=False)
    """Set when the connection closes: long polls stop waiting."""


def set_error(result: Any, exc: MQError) -> None:
    """Put an error on a per-topic or per-partition result (all have these two keys)."""
    result["error"] = exc.code
    result["message"] = exc.message


def duplicate_partitions(topics: Iterable[Mapping[str, Any]]) -> set[tuple[str, int]]:
    """The (topic, partition) pairs a request names more than once, in one pass.

    Per-partition requests refuse such entries (INVALID_REQUEST), as Kafka refuses
    duplicate topics in CreateTopics and AlterConfigs: with both entries refused the
    client cannot wonder which of two batches was appended, and no handler does the
    same work twice.
    """
    seen: set[tuple[str, int]] = set()
    repeated: set[tuple[str, int]] = set()
    for topic in topics:
        name = topic["name"]
        for part in topic["partitions"]:
            key = (name, part["partition"])
            if key in seen:
                repeated.add(key)
            else:
                seen.add(key)
    return repeated


def duplicate_names(names: Iterable[str]) -> set[str]:
    """The names a list holds more than once, in one pass (see :func:`duplicate_partitions`)."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for name in names:
        if name in seen:
            repeated.add(name)
        else:
            seen.add(name)
    return repeated


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
    still led here; False at once if there is none to wait on (a long poll's step).

    One future for all the partitions: an append wakes the long poll's task in
    the loop's next turn, before the appending produce's response goes out
    (see :meth:`mq.broker.connection.Connection._serve`).
    """
    led = [p for p in partitions if p.is_leader]
    if not led:
        return False
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    for partition in led:
        partition.wait_for_data(waiter)
    timer = loop.call_later(timeout_s, _time_up, waiter)
    try:
        await waiter
    finally:
        timer.cancel()
        for partition in led:
            partition.stop_waiting(waiter)
    return True


def _time_up(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)

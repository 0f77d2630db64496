"""A queue client's receives in flight and the messages they brought, kept between calls.

:meth:`QueueClient.receive <mq.client.queue.QueueClient.receive>` keeps one
:class:`Poll` per (queue, group, filter, lease): a long poll to each leader at
once, whose messages land in the poll's buffer, and :func:`take` hands them out,
skipping those whose lease has (nearly) run out.

Thread safety: none; one event loop owns a client and its polls.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from mq.client.queue_messages import QueueMessage
from mq.errors import MQError

LEASE_MARGIN_MS = 200
"""A kept message whose lease ends sooner than this is not handed out (it would expire
before the caller could ack it)."""


@dataclass(eq=False)
class Poll:
    """Receives of one (queue, group, filter, lease) in flight, and what they brought."""

    buffer: deque[QueueMessage] = field(default_factory=deque)
    inflight: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    error: MQError | None = None


def take(poll: Poll, max_messages: int, kept: int) -> list[QueueMessage]:
    """Up to ``max_messages`` buffered messages still leased; the first ``kept`` (left from
    earlier calls) only with :data:`LEASE_MARGIN_MS` of their lease left. Ones that just
    came are handed out however short their lease (dropping them would spend a delivery
    the caller never saw)."""
    now = time.time() * 1000
    taken: list[QueueMessage] = []
    while poll.buffer and len(taken) < max_messages:
        message = poll.buffer.popleft()
        margin = LEASE_MARGIN_MS if kept > 0 else 0
        kept -= 1
        if message.lease_deadline_ms > now + margin:
            taken.append(message)
    return taken

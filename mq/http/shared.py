"""Answers shared between requests: any number of open consoles cost one computation.

An admin API answer may take peer calls to every broker (:mod:`mq.http.admin_data`).
:class:`SharedAnswers` computes each answer (by key: the request's path and query)
once while it is in progress and for :data:`SHARE_S` after it started: requests
arriving meanwhile get the same result (or the same error). So the work an endpoint
costs the cluster is bounded per second, whatever the number of browsers polling it.
A client that goes away does not cancel a computation others wait for.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

T = TypeVar("T")

SHARE_S: Final = 1.0
"""How long an answer is reused: half the console's poll interval (2 s), so each poll
sees data at most that old."""
MAX_KEYS: Final = 1_000
"""Answers kept at once (keys are paths: topic and group names come from the client).
Past it, answers are computed per request until expired ones are dropped."""


@dataclass
class _Entry:
    future: asyncio.Future[Any]
    expires: float


class SharedAnswers:
    def __init__(
        self,
        ttl_s: float = SHARE_S,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._max_keys = max_keys
        self._clock = clock
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str, compute: Callable[[], Awaitable[T]]) -> T:
        """The answer for ``key``: shared if one is in progress or fresh, else computed."""
        now = self._clock()
        found = self._entries.get(key)
        if found is not None and (not found.future.done() or now < found.expires):
            result: T = await asyncio.shield(found.future)
            return result
        if len(self._entries) >= self._max_keys:
            self._drop_expired(now)
        future: asyncio.Future[T] = asyncio.ensure_future(compute())
        if len(self._entries) < self._max_keys:
            self._entries[key] = _Entry(future, now + self._ttl_s)
        return await asyncio.shield(future)

    def _drop_expired(self, now: float) -> None:
        for key in [k for k, e in self._entries.items() if e.future.done() and now >= e.expires]:
            del self._entries[key]

"""Long requests share the event loop: big frames are decoded and encoded in a worker
thread, and per-entry loops of handlers give the loop back every so many entries.

A request at its list bounds (a produce naming 20,000 partitions, an
``alter_configs`` of 20,000 topics, a metadata request for 100,000 topics) is
linear work, but done in one go it held every other client for 0.2-1.5 s
(issue 18, F5). Three things keep it from doing so:

* frames of :data:`OFFLOAD_BYTES` or more are unpacked and validated in the
  codec thread (:func:`decode_payload`); their connection starts nothing else
  meanwhile, so its requests still start in order;
* responses to such requests, and responses with more than
  :data:`LARGE_LIST` entries in a list (:func:`large_body`), are encoded in
  that thread too (counting their items is a Python walk of the whole body);
* handlers call :meth:`Pacer.due` once per entry and ``await asyncio.sleep(0)``
  when it says so (:data:`ENTRIES_PER_TURN`). A produce's appends, an
  offset commit's commits and a queue ack's settlements must keep the order of
  their connection's requests, so such a request with more entries than that
  holds its connection's next request until its handler says its work is
  queued (:func:`queued`, :func:`ordered_entries`).

Pure Python in a thread still takes the GIL, but the interpreter hands it back
to the event loop's thread within ``sys.getswitchinterval()`` (5 ms) when
that thread wants it; one codec thread keeps a single such contender.

Thread safety: :func:`decode_payload` and the encoders run in the codec
thread on objects no other thread touches meanwhile; the rest is the loop's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, Final

from mq.errors import MQError
from mq.wire import apis_data, apis_groups, apis_queues
from mq.wire.messages import Request, RequestEnvelope, decode_request, unpack_request
from mq.wire.registry import Api

OFFLOAD_BYTES: Final = 256 * 1024
"""Request frames from this size on are decoded in the codec thread (and their responses
encoded there). Unpacking and validating costs ~20-40 ms per MB of small entries, so a
frame below this takes a few milliseconds of the loop at most; a big produce of a few
large batches (record bytes decode fast) pays one thread hop for nothing (~50 us)."""
LARGE_LIST: Final = 1_000
"""A response with more entries than this in one of its lists (topics, or partitions
of its topics together) is encoded in the codec thread: a few milliseconds of
encoding and item counting and up."""
ENTRIES_PER_TURN: Final = 64
"""Entries a handler's loop handles before it gives the event loop a turn: a few
microseconds to tens of microseconds each, so other clients wait about a millisecond
behind a request at its list bounds; a turn of the loop costs ~20 us (~2 % more for
such a request). 256 before: the isolation benchmark's list-bound pattern, this and
that side by side twice, quiet p50 5.8 and 5.1 ms → 4.3 and 4.4, p99 45 and 40 → 39
and 36."""

CODEC = ThreadPoolExecutor(1, thread_name_prefix="mq-codec")
"""The codec thread: one, so that big requests queue for it rather than take the GIL
from the event loop together."""


_QUEUED: ContextVar[Callable[[], None] | None] = ContextVar("mq_queued", default=None)
"""Set in the task of a request whose handler paces an order-sensitive loop (a produce
of many partitions): called once the loop is done, it lets its connection start the
next request (which might append to the same partitions)."""


def ordered_task_context(release: Callable[[], None]) -> Any:
    """Set ``release`` for the task created next (tasks copy the context); returns the
    token to pass to :func:`reset_context` right after creating it."""
    return _QUEUED.set(release)


def reset_context(token: Any) -> None:
    _QUEUED.reset(token)


def queued() -> None:
    """A handler's order-sensitive part is done (everything queued on the partitions'
    writers): its connection may start the next request."""
    release = _QUEUED.get()
    if release is not None:
        _QUEUED.set(None)
        release()


def ordered_entries(api: Api[Any, Any], body: Any) -> int:
    """Entries of a request whose handler paces an order-sensitive loop (produce: appends,
    offset_commit: commits, queue_ack: settlements), 0 for any other request."""
    if api is apis_data.PRODUCE or api is apis_groups.OFFSET_COMMIT:
        return sum(len(topic["partitions"]) for topic in body["topics"])
    if api is apis_queues.QUEUE_ACK:
        return sum(len(topic["settlements"]) for topic in body["topics"])
    return 0


class Pacer:
    """Counts a loop's entries; :meth:`due` is true every :data:`ENTRIES_PER_TURN`."""

    __slots__ = ("_left",)

    def __init__(self) -> None:
        self._left = ENTRIES_PER_TURN

    def due(self) -> bool:
        """Count one entry; whether the loop should ``await asyncio.sleep(0)`` now."""
        self._left -= 1
        if self._left > 0:
            return False
        self._left = ENTRIES_PER_TURN
        return True


class Undecodable(Exception):
    """A request whose envelope was read but whose body was refused (answerable)."""

    def __init__(
        self,
        correlation_id: int,
        error: MQError,
        api_key: int = -1,
        client_id: str | None = None,
        spent: float = 0.0,
    ) -> None:
        super().__init__(error.message)
        self.correlation_id = correlation_id
        self.error = error
        self.api_key = api_key
        self.client_id = client_id
        """Whose request it was (its quotas are charged for it: issue 20)."""
        self.spent = spent
        """CPU seconds the codec thread spent on it (charged to its client's quota)."""


def decode_payload(payload: bytes) -> tuple[Request[Any], float]:
    """Unpack and validate a request payload (in the codec thread); the request and the
    CPU seconds that took (its client's request quota counts them, issue 20).

    Raises ProtocolError (no trustworthy correlation id: close) or
    :class:`Undecodable` (answer with its error).
    """
    started = time.thread_time()
    envelope: RequestEnvelope = unpack_request(payload)
    try:
        return decode_request(envelope), time.thread_time() - started
    except MQError as exc:
        spent = time.thread_time() - started
        raise Undecodable(
            envelope.correlation_id, exc, envelope.api_key, envelope.client_id, spent
        ) from exc


def large_body(body: object) -> bool:
    """Whether a response body has a list of more than :data:`LARGE_LIST` entries, or
    lists in its list entries (a topic's partitions) of more than that together.
    Looks at no more than :data:`LARGE_LIST` entries of each top-level list."""
    if not isinstance(body, dict):
        return False
    for value in body.values():
        if not isinstance(value, list):
            continue
        if len(value) > LARGE_LIST:
            return True
        inner = 0
        for item in value:
            if isinstance(item, dict):
                for field in item.values():
                    if isinstance(field, list):
                        inner += len(field)
        if inner > LARGE_LIST:
            return True
    return False

"""The consumer's rebalance callbacks, shaped like aiokafka's ``ConsumerRebalanceListener``.

::

    class CommitOnRevoke(ConsumerRebalanceListener):
        def __init__(self, consumer: Consumer) -> None:
            self.consumer = consumer

        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            await self.consumer.commit({tp: await self.consumer.position(tp) for tp in revoked})

        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            ...

    consumer.subscribe(["events"], listener=CommitOnRevoke(consumer))

The group rebalances cooperatively (see :mod:`mq.client.group`), so the
callbacks see *changes*, as Kafka's cooperative protocol (KIP-429) does, not
aiokafka's "everything is revoked, then everything assigned again":

* ``on_partitions_revoked(revoked)``: only the partitions this member gives
  up, once its fetch and its records of them have stopped (records already
  returned by ``getmany`` stay the application's), before their position is
  committed (with auto-commit) and before any other member gets them. Also
  called on :meth:`~mq.client.consumer.Consumer.stop` with every partition
  still owned, as Kafka's consumer does on close (aiokafka does not).
* ``on_partitions_assigned(assigned)``: only the partitions added, once they
  are in :meth:`~mq.client.consumer.Consumer.assignment` and before any of
  their records is fetched, so it may ``seek`` them. Partitions kept across a
  rebalance are in neither call and are consumed without a pause.
* ``on_partitions_lost(lost)``: the membership was lost (session expired,
  fenced, …) and the partitions may already belong to another member: they
  were dropped without a commit. Calls ``on_partitions_revoked`` unless
  overridden; a listener that commits there should override it.

Each method may be a plain function or a coroutine function; the group waits
for it before it goes on. Heartbeats pause meanwhile, so it must finish well
within the session and rebalance timeouts, or the member is expelled. An
exception it raises is logged and the rebalance goes on, as in aiokafka.
"""

from __future__ import annotations

import abc
import inspect
import logging
from collections.abc import Awaitable, Callable

from mq.client.types import TopicPartition

log = logging.getLogger(__name__)

Callback = Callable[[set[TopicPartition]], Awaitable[None] | None]


class ConsumerRebalanceListener(abc.ABC):
    """Callbacks for partitions given to and taken from a group member (module docstring)."""

    @abc.abstractmethod
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Awaitable[None] | None:
        """These partitions are about to go to another member: commit or flush them now."""

    @abc.abstractmethod
    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Awaitable[None] | None:
        """These partitions were added; nothing of them has been fetched yet."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Awaitable[None] | None:
        """The membership was lost with these partitions (default: ``on_partitions_revoked``)."""
        return self.on_partitions_revoked(lost)


async def run_callback(callback: Callback, tps: set[TopicPartition], group_id: str) -> None:
    """Run one callback with a copy of ``tps`` (if any), awaiting it if needed; log its error."""
    if not tps:
        return
    try:
        result = callback(set(tps))
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception(
            "group %s: the rebalance listener's %s failed",
            group_id,
            getattr(callback, "__name__", callback),
        )

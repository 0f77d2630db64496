"""Followers pull from leaders: one :class:`ReplicaFetcher` per leader broker.

A fetcher keeps one connection to its leader broker and sends replica_fetch
requests in a loop, each for every partition this broker follows there (long
poll: the leader answers when it has data or after ``max_wait_ms``). For each
partition in the answer, in order:

* records: appended as they are (the leader's offsets and epochs), then the
  replica's high watermark and log start follow the leader's;
* a diverging epoch: the replica truncates to where its log and the leader's
  agree (the smaller of the leader's end of that epoch and its own), and
  fetches again from there;
* offset out of range: the replica is below the leader's log start (retention
  ran meanwhile) and starts again, empty, from there;
* an epoch or leadership error: the metadata will move the partition (to
  another fetcher, or to leading); it sits out a short backoff meanwhile.

The next request goes out once every append of the answer is done, so the
offset it carries is the follower's log end: what lets the leader move its
high watermark.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from mq.client.connection import Connection
from mq.errors import (
    ClusterAuthorizationFailedError,
    MQError,
    OffsetOutOfRangeError,
    StorageError,
    error_for_code,
)
from mq.replication.hello import BrokerCredentials, open_broker_connection
from mq.storage.log import AppendInfo, Log
from mq.wire.apis_replication import (
    NO_EPOCH,
    REPLICA_FETCH,
    ReplicaFetchedPartition,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
    ReplicaFetchTopic,
)

log = logging.getLogger(__name__)

BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
Address = tuple[str, int]


class FollowerReplica(Protocol):
    """What a fetcher needs of a partition it feeds (the broker's Partition)."""

    topic: str
    index: int
    log: Log
    leader_epoch: int
    local_end: int

    async def append_replicated(self, data: bytes | bytearray | memoryview) -> AppendInfo: ...
    async def truncate_to(self, offset: int) -> None: ...
    async def reset_to(self, offset: int) -> None: ...
    def follow_high_watermark(self, leader_high_watermark: int) -> None: ...
    async def advance_log_start(self, offset: int) -> None: ...


class ReplicaFetcher:
    """Replicates every partition this broker follows on one leader broker."""

    def __init__(
        self,
        node_id: int,
        leader_id: int,
        resolve: Callable[[int], Address | None],
        *,
        max_wait_ms: int,
        max_bytes: int,
        credentials: BrokerCredentials,
    ) -> None:
        self.node_id = node_id
        self._credentials = credentials
        self.leader_id = leader_id
        self._resolve = resolve
        self._max_wait_ms = max_wait_ms
        self._max_bytes = max_bytes
        self.replicas: dict[tuple[str, int], FollowerReplica] = {}
        self._paused_until: dict[tuple[str, int], float] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connection: Connection | None = None
        self._address: Address | None = None

    # -- membership ----------------------------------------------------------------------

    def add(self, replica: FollowerReplica) -> None:
        key = (replica.topic, replica.index)
        if self.replicas.get(key) is replica and key not in self._paused_until:
            return  # already fetched: nothing to hurry
        self.replicas[key] = replica
        self._paused_until.pop(key, None)
        self._changed.set()  # a long poll in flight is not waited for: see _run
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.leader_id}"
            )

    def remove(self, topic: str, index: int) -> None:
        self.replicas.pop((topic, index), None)
        self._paused_until.pop((topic, index), None)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._close()

    # -- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = BACKOFF_S
        while True:
            self._changed.clear()  # before the request is built: an add after it counts
            request = self._request()
            if request is None:
                wait = self._next_unpause()
                try:
                    await asyncio.wait_for(self._changed.wait(), wait)
                except TimeoutError:
                    pass
                continue
            try:
                connection = await self._connect()
                answer = await connection.request(
                    REPLICA_FETCH, request, timeout_s=self._max_wait_ms / 1000 + 10
                )
                if not await self._answered_first(answer):
                    continue  # a new partition to follow: ask again now, with it
                response = answer.result()
                sent = {
                    (t["name"], p["partition"]): p["fetch_offset"]
                    for t in request["topics"]
                    for p in t["partitions"]
                }
                await asyncio.gather(
                    *(
                        self._handle(t["name"], p, sent)
                        for t in response["topics"]
                        for p in t["partitions"]
                    )
                )
                backoff = BACKOFF_S
            except Exception as exc:  # MQError, or a bug: either way the fetcher goes on
                if isinstance(exc, ClusterAuthorizationFailedError):  # a misconfigured secret
                    log.warning("node %d fetching from %d: %s", self.node_id, self.leader_id, exc)
                elif isinstance(exc, MQError):
                    log.info("node %d fetching from %d: %s", self.node_id, self.leader_id, exc)
                else:
                    log.exception("node %d fetching from %d", self.node_id, self.leader_id)
                self._close()
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)

    async def _answered_first(self, answer: asyncio.Future[ReplicaFetchResponse]) -> bool:
        """Wait for ``answer``, or until a partition is added (then drop the answer).

        A new follower does not wait out a long poll sent without it. A dropped
        answer's records are simply fetched again: nothing was appended from it.
        """
        changed: asyncio.Future[Any] = asyncio.ensure_future(self._changed.wait())
        waiting: set[asyncio.Future[Any]] = {answer, changed}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
        if answer.done():
            return True
        answer.add_done_callback(_retrieve)
        return False

    def _request(self) -> ReplicaFetchRequest | None:
        now = time.monotonic()
        topics: dict[str, ReplicaFetchTopic] = {}
        for (topic, index), replica in self.replicas.items():
            if self._paused_until.get((topic, index), 0) > now:
                continue
            entry = topics.setdefault(topic, {"name": topic, "partitions": []})
            entry["partitions"].append(
                {
                    "partition": index,
                    "fetch_offset": replica.local_end,
                    "last_fetched_epoch": replica.log.epochs.latest_epoch,
                    "current_leader_epoch": replica.leader_epoch,
                }
            )
        if not topics:
            return None
        return {
            "replica_id": self.node_id,
            "max_wait_ms": self._max_wait_ms,
            "min_bytes": 1,
            "max_bytes": self._max_bytes,
            "topics": list(topics.values()),
        }

    def _next_unpause(self) -> float | None:
        if not self._paused_until:
            return None
        return max(0.0, min(self._paused_until.values()) - time.monotonic())

    async def _connect(self) -> Connection:
        address = self._resolve(self.leader_id)
        if address is None:
            raise MQError(f"broker {self.leader_id} is not registered")
        if self._connection is not None and (self._connection.closed or address != self._address):
            self._close()
        if self._connection is None:
            self._connection = await open_broker_connection(
                *address, self._credentials, client_id=f"mq-replica-{self.node_id}"
            )
            self._address = address
        return self._connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # -- one partition's answer --------------------------------------------------------------

    async def _handle(
        self, topic: str, result: ReplicaFetchedPartition, sent: dict[tuple[str, int], int]
    ) -> None:
        key = (topic, result["partition"])
        replica = self.replicas.get(key)
        if replica is None or replica.local_end != sent.get(key):
            return  # moved or changed meanwhile: the next request starts from its log end
        try:
            if result["error"]:
                await self._failed(replica, result)
            elif result["diverging_end_offset"] >= 0 or result["diverging_epoch"] != NO_EPOCH:
                await self._truncate(replica, result)
            else:
                if result["records"]:
                    await replica.append_replicated(result["records"])
                if result["log_start_offset"] > replica.log.log_start_offset:
                    await replica.advance_log_start(result["log_start_offset"])
                replica.follow_high_watermark(result["high_watermark"])
        except MQError as exc:
            if isinstance(exc, StorageError):
                log.error("%s-%d: replica offline: %s", *key, exc)
            else:
                log.warning("%s-%d: replicating from %d: %s", *key, self.leader_id, exc)
            self._pause(key)

    async def _failed(self, replica: FollowerReplica, result: ReplicaFetchedPartition) -> None:
        error = error_for_code(result["error"])
        if error is OffsetOutOfRangeError and result["log_start_offset"] > replica.local_end:
            log.info(
                "%s-%d: below the leader's log start %d, starting again from there",
                replica.topic,
                replica.index,
                result["log_start_offset"],
            )
            await replica.reset_to(result["log_start_offset"])
            return
        log.debug("%s-%d: %s", replica.topic, replica.index, result["message"])
        self._pause((replica.topic, replica.index))

    async def _truncate(self, replica: FollowerReplica, result: ReplicaFetchedPartition) -> None:
        epoch, leader_end = result["diverging_epoch"], result["diverging_end_offset"]
        if epoch == NO_EPOCH or leader_end < 0:
            target = min(replica.local_end, max(result["log_start_offset"], 0))
        else:
            _, own_end = replica.log.end_offset_for_epoch(epoch)
            target = min(leader_end, own_end if own_end >= 0 else leader_end)
        log.info(
            "%s-%d: diverged from leader %d at epoch %d; truncating %d → %d",
            replica.topic,
            replica.index,
            self.leader_id,
            epoch,
            replica.local_end,
            target,
        )
        await replica.truncate_to(target)

    def _pause(self, key: tuple[str, int]) -> None:
        self._paused_until[key] = time.monotonic() + BACKOFF_S * 2


def _retrieve(future: asyncio.Future[ReplicaFetchResponse]) -> None:
    if not future.cancelled():
        future.exception()

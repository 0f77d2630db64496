"""Consumer-group membership on the client side: join, heartbeat, cooperative handover.

The coordinator computes the assignment (see :mod:`mq.wire.apis_groups`); a
member only says what it subscribes to and what it owns, and does what each
heartbeat response says:

* ``revoke``: stop fetching those partitions and handing out their records,
  call the listener's ``on_partitions_revoked``, commit their positions (with
  auto-commit), then leave them out of ``owned`` in the next heartbeat — sent
  at once, so that their new owner gets them quickly;
* ``assignment``: call the listener's ``on_partitions_assigned`` for the new
  partitions, then start them from their committed offsets (or the reset
  policy). Partitions kept across a rebalance are never paused.

The listener is a :class:`~mq.client.listener.ConsumerRebalanceListener`; a
member that stops calls its ``on_partitions_revoked`` with every partition it
still owns before the last commit, so that commit-on-revoke covers stops too.

Static membership: with a ``group_instance_id`` the member does not leave on
stop, so a restart within the session timeout gets its partitions back
without a rebalance (as Kafka's static members). Losing membership
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, an expired session) drops the
partitions without committing (``on_partitions_lost``) and rejoins;
retriable errors (coordinator moved or unavailable, network) find the
coordinator again after a backoff;
any other error (FENCED_INSTANCE_ID, INVALID_SESSION_TIMEOUT, …) is fatal and
raised to the application by the consumer's next call.

Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from mq.client.client import Client
from mq.client.fetcher import Fetcher
from mq.client.listener import ConsumerRebalanceListener, run_callback
from mq.client.offsets import by_topic
from mq.client.types import TopicPartition
from mq.errors import (
    ClientStateError,
    FencedInstanceIdError,
    IllegalGenerationError,
    MQError,
    NetworkError,
    RequestTimedOutError,
    UnknownMemberIdError,
    error_for_code,
)
from mq.wire.apis_groups import (
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
)

log = logging.getLogger(__name__)


class GroupMember:
    """One consumer's membership of a group; see the module docstring."""

    def __init__(
        self,
        client: Client,
        fetcher: Fetcher,
        *,
        group_id: str,
        group_instance_id: str | None,
        session_timeout_s: float,
        rebalance_timeout_s: float,
        heartbeat_interval_s: float,
        assignor: str,
        auto_commit_interval_s: float | None,
        retry_backoff_s: float,
    ) -> None:
        self._client = client
        self._fetcher = fetcher
        self.group_id = group_id
        self.instance_id = group_instance_id
        self._session_s = session_timeout_s
        self._rebalance_s = rebalance_timeout_s
        self._interval_s = self._configured_interval_s = heartbeat_interval_s
        self._assignor = assignor
        self._auto_commit_s = auto_commit_interval_s
        self._backoff_s = retry_backoff_s
        self.member_id = ""
        self.generation = -1
        self.subscription: set[str] = set()
        self.owned: set[TopicPartition] = set()
        self.listener: ConsumerRebalanceListener | None = None
        self.fatal: MQError | None = None
        self._coordinator: tuple[str, int] | None = None
        """The coordinator's address (it may be a broker this client has no metadata of)."""
        self._committed: dict[TopicPartition, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._committer: asyncio.Task[None] | None = None
        self.joined = asyncio.Event()
        """Set once the first heartbeat answered (the member has its first assignment)."""

    # -- lifecycle ----------------------------------------------------------------------------

    def subscribe(self, topics: set[str]) -> None:
        if topics != self.subscription:
            self.subscription = set(topics)
            self.generation = -1  # rejoin with the new subscription
            self._client.add_topics(topics)
            self._wake.set()
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._run(), name="mq-group")

    async def stop(self) -> None:
        """Revoke (the listener), commit (with auto-commit), then leave unless static."""
        for task in (self._task, self._committer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.fatal is None:
            self._fetcher.hold(self.owned)  # what was handed out is what gets committed
            if self.listener is not None:
                await run_callback(self.listener.on_partitions_revoked, self.owned, self.group_id)
            with contextlib.suppress(MQError):
                if self._auto_commit_s is not None:
                    await self.commit(None)
                if self.member_id and self.instance_id is None:
                    await self._call(
                        LEAVE_GROUP,
                        {
                            "group_id": self.group_id,
                            "member_id": self.member_id,
                            "group_instance_id": None,
                            "reason": "the consumer stopped",
                        },
                    )

    # -- the membership loop --------------------------------------------------------------

    def start_auto_commit(self) -> None:
        """Commit the positions every ``auto_commit_interval`` (group or manual assignment)."""
        if self._auto_commit_s is not None and self._committer is None:
            self._committer = asyncio.get_running_loop().create_task(
                self._auto_commit(self._auto_commit_s), name="mq-auto-commit"
            )

    async def _auto_commit(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.commit(None)
            except MQError as exc:
                log.info("group %s: auto-commit failed: %r", self.group_id, exc)

    async def _run(self) -> None:
        last_ok = time.monotonic()
        while True:
            try:
                if self.generation < 0:
                    await self._join()
                await self._heartbeat()
                last_ok = time.monotonic()
                delay = self._interval_s
            except FencedInstanceIdError as exc:
                self.fatal = exc
                await self._lose_all()
                return
            except (UnknownMemberIdError, IllegalGenerationError) as exc:
                log.info("group %s: membership lost (%s), rejoining", self.group_id, exc.name)
                await self._lose_all()
                if isinstance(exc, UnknownMemberIdError):
                    self.member_id = ""
                self.generation = -1
                delay = 0
            except MQError as exc:
                if not exc.retriable and not _coordinator_gone(exc):
                    log.error("group %s: %r", self.group_id, exc)
                    self.fatal = exc  # e.g. INVALID_SESSION_TIMEOUT: raised to the application
                    await self._lose_all()
                    return
                self._coordinator = None if _coordinator_gone(exc) else self._coordinator
                if time.monotonic() - last_ok > self._session_s and self.owned:
                    log.warning("group %s: session expired, dropping partitions", self.group_id)
                    await self._lose_all()
                    self.generation = -1
                delay = self._backoff_s
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    async def _join(self) -> None:
        response = await self._call(
            JOIN_GROUP,
            {
                "group_id": self.group_id,
                "member_id": self.member_id,
                "group_instance_id": self.instance_id,
                "session_timeout_ms": int(self._session_s * 1000),
                "rebalance_timeout_ms": int(self._rebalance_s * 1000),
                "topics": sorted(self.subscription),
                "assignor": self._assignor,
            },
        )
        self.member_id = response["member_id"]
        self.generation = response["generation_id"]
        self._take_interval(response["heartbeat_interval_ms"])
        log.info(
            "group %s: joined as %s (generation %d)", self.group_id, self.member_id, self.generation
        )

    def _take_interval(self, broker_ms: int) -> None:
        """Heartbeat as often as the broker asks, or as this member was told if more often."""
        if broker_ms > 0:
            self._interval_s = min(self._configured_interval_s, broker_ms / 1000)

    async def _heartbeat(self) -> None:
        response = await self._call(
            HEARTBEAT,
            {
                "group_id": self.group_id,
                "member_id": self.member_id,
                "generation_id": self.generation,
                "owned": by_topic(self.owned),
            },
        )
        self.generation = response["generation_id"]
        self._take_interval(response["heartbeat_interval_ms"])
        target = _tps(response["assignment"])
        revoke = (_tps(response["revoke"]) | (self.owned - target)) & self.owned
        if revoke:
            await self._revoke(revoke)
            self._wake.set()  # report them gone at once
        new = target - self.owned - revoke
        if new:
            await self._assign(new)
        self.joined.set()

    async def _revoke(self, tps: set[TopicPartition]) -> None:
        if self.listener is not None:
            self._fetcher.hold(tps)  # the positions stay put while the listener commits them
            await run_callback(self.listener.on_partitions_revoked, tps, self.group_id)
        positions = {tp: s.position for tp in tps if (s := self._fetcher.states.get(tp))}
        self._fetcher.remove(tps)
        if self._auto_commit_s is not None:
            offsets = {tp: p for tp, p in positions.items() if p is not None}
            with contextlib.suppress(MQError):
                await self.commit(offsets)
        self.owned -= tps
        log.info("group %s: revoked %s", self.group_id, sorted(tps))

    async def _assign(self, tps: set[TopicPartition]) -> None:
        for tp in sorted(tps):
            self._fetcher.add(tp, None, reset="committed")
        self.owned |= tps
        if self.listener is not None:
            self._fetcher.hold(tps)  # nothing fetched before the listener had its say (seeks)
            try:
                await run_callback(self.listener.on_partitions_assigned, tps, self.group_id)
            finally:
                self._fetcher.release(tps)
        log.info("group %s: assigned %s", self.group_id, sorted(tps))

    async def _lose_all(self) -> None:
        lost, self.owned = set(self.owned), set()
        self._fetcher.remove(lost)
        if lost and self.listener is not None:
            await run_callback(self.listener.on_partitions_lost, lost, self.group_id)

    # -- offsets --------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int] | None) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition that moved)."""
        if offsets is None:
            offsets = {
                tp: s.position
                for tp, s in self._fetcher.states.items()
                if s.position is not None and self._committed.get(tp) != s.position
            }
        if not offsets:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, offset in offsets.items():
            topics.setdefault(tp.topic, []).append({"partition": tp.partition, "offset": offset})
        in_group = self.generation >= 0 and bool(self.member_id)
        response = await self._call(
            OFFSET_COMMIT,
            {
                "group_id": self.group_id,
                "generation_id": self.generation if in_group else -1,
                "member_id": self.member_id if in_group else "",
                "group_instance_id": self.instance_id if in_group else None,
                "topics": [{"name": n, "partitions": p} for n, p in topics.items()],
            },
        )
        for topic in response["topics"]:
            for part in topic["partitions"]:
                if part["error"]:
                    raise error_for_code(part["error"])(part["message"])
        self._committed.update(offsets)

    async def fetch_committed(self, tps: set[TopicPartition]) -> dict[TopicPartition, int]:
        """The committed offsets of ``tps`` (partitions with none are left out)."""
        if not tps:
            return {}
        topics = [{"name": t, "partitions": p} for t, p in by_topic(tps).items()]
        response = await self._call(OFFSET_FETCH, {"group_id": self.group_id, "topics": topics})
        out: dict[TopicPartition, int] = {}
        for topic in response["topics"]:
            for part in topic["partitions"]:
                if part["error"]:
                    raise error_for_code(part["error"])(part["message"])
                if part["offset"] >= 0:
                    out[TopicPartition(topic["name"], part["partition"])] = part["offset"]
        self._committed.update(out)
        return out

    # -- the coordinator ----------------------------------------------------------------------

    async def _call(self, api: Any, body: Any) -> Any:
        if self._coordinator is None:
            found = await self._client.call_any(
                FIND_COORDINATOR, {"key": self.group_id, "key_type": 0}
            )
            self._coordinator = (found["host"], found["port"])
        try:
            return await self._client.call_address(self._coordinator, api, body)
        except MQError as exc:
            if _coordinator_gone(exc):
                self._coordinator = None
            raise


def _coordinator_gone(error: MQError) -> bool:
    return isinstance(error, NetworkError | RequestTimedOutError) or error.name in (
        "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE",
        "COORDINATOR_LOAD_IN_PROGRESS",
    )


def _tps(assignment: Mapping[str, list[int]]) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for topic, parts in assignment.items() for p in parts}


def require_group(member: GroupMember | None) -> GroupMember:
    if member is None:
        raise ClientStateError("this needs a consumer with a group_id")
    return member

"""Handlers of the queue APIs: queue_receive (long poll), queue_ack, describe_queue.

The state lives in :class:`mq.broker.queues.ShareManager`; a handler loads the
sessions it needs, acts, and answers once the change is saved.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING, Any, cast

from mq.broker.context import RequestContext, set_error
from mq.broker.pacing import Pacer, queued
from mq.errors import InvalidReceiptError, MQError, NotLeaderOrFollowerError
from mq.queues.share_partition import Acquired, Filter
from mq.wire.apis_queues import (
    ACK,
    EXTEND,
    REJECT,
    RELEASE,
    AckRequest,
    AckResponse,
    DescribeQueueRequest,
    DescribeQueueResponse,
    ReceiveRequest,
    ReceiveResponse,
)

if TYPE_CHECKING:
    from mq.broker.broker import Broker
    from mq.broker.queues import Session, ShareManager

_rotation = itertools.count()


def _manager(broker: Broker) -> ShareManager:
    if broker.queues is None:
        raise NotLeaderOrFollowerError("this broker does not serve queues yet")
    return broker.queues


async def queue_receive(
    broker: Broker, ctx: RequestContext, body: ReceiveRequest
) -> ReceiveResponse:
    """Lease up to max_messages records over the partitions asked for; wait up to
    max_wait_ms for some if none is visible."""
    manager = _manager(broker)
    group = body["group"]
    results: dict[tuple[str, int], dict[str, Any]] = {}
    sessions: dict[tuple[str, int], Session] = {}
    pacer = Pacer()
    for topic in body["topics"]:
        for index in topic["partitions"]:
            if pacer.due():  # look-ups only: nothing is leased before this loop ends
                await asyncio.sleep(0)
            key = (topic["name"], index)
            results[key] = {"partition": index, "error": 0, "message": None}
            try:
                sessions[key] = await manager.session(group, *key)
            except MQError as exc:
                set_error(results[key], exc)
    wanted: Filter | None = None
    if body["filter"]:
        wanted = {name: {bytes(v) for v in values} for name, values in body["filter"].items()}
    deadline = time.monotonic() + body["max_wait_ms"] / 1000
    order = list(sessions)
    if order:
        shift = next(_rotation) % len(order)
        order = order[shift:] + order[:shift]  # no partition always served first
    acquired: dict[tuple[str, int], list[Acquired]] = {}
    while True:
        left, budget = body["max_messages"], body["max_bytes"]
        for key in order:
            if left <= 0 or key in acquired or (budget <= 0 and acquired):
                continue
            try:
                got = manager.acquire(
                    sessions[key], left, body["visibility_timeout_ms"], wanted, budget
                )
            except MQError as exc:
                set_error(results[key], exc)
                continue
            if got:
                acquired[key] = got
                left -= len(got)
                budget = max(0, budget - sum(sessions[key].share.size_of(a.offset) for a in got))
        remaining = deadline - time.monotonic()
        if acquired or remaining <= 0 or ctx.closing:
            break
        live = [sessions[k] for k in order if not results[k]["error"]]
        if not live:
            break
        waiters = manager.wait_for_visible(live)
        try:
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
    for key, got in acquired.items():
        session, result = sessions[key], results[key]
        try:
            await manager.durable(session)
        except MQError as exc:
            set_error(result, exc)
            continue
        result["records"] = manager.records_of(session, got)
        result["offsets"] = [a.offset for a in got]
        result["counts"] = [a.deliveries for a in got]
        result["lease_deadline_ms"] = got[0].deadline
        if broker.metrics is not None:  # per partition answered: messages leased, bytes sent
            size = len(result["records"])
            broker.metrics.consumed(key[0], len(got), size, ctx.principal, ctx.client_id)
    response = {
        "topics": [
            {
                "name": topic["name"],
                "partitions": [results[(topic["name"], i)] for i in topic["partitions"]],
            }
            for topic in body["topics"]
        ]
    }
    return cast(ReceiveResponse, response)


async def queue_ack(broker: Broker, ctx: RequestContext, body: AckRequest) -> AckResponse:
    """Settle receipts: each is applied or reported in ``failed`` (a stale receipt).

    Work per request, not per entry, wherever entries name one partition: its session
    is looked up and made ready once, acted on once, and waited on to be durable once.
    """
    manager = _manager(broker)
    group = body["group"]
    topics: list[dict[str, Any]] = []
    found: dict[tuple[str, int], Session] = {}
    touched: dict[int, tuple[Session, list[dict[str, Any]]]] = {}
    pacer = Pacer()  # (many entries: nothing else of this connection starts until queued())
    for topic in body["topics"]:
        results: list[dict[str, Any]] = []
        topics.append({"name": topic["name"], "settlements": results})
        for settlement in topic["settlements"]:
            if pacer.due():
                await asyncio.sleep(0)
            result: dict[str, Any] = {
                "partition": settlement["partition"],
                "error": 0,
                "message": None,
                "failed": [],
                "never_delivered": [],
            }
            results.append(result)
            key = (topic["name"], settlement["partition"])
            try:
                session = found.get(key)
                if session is None or session.closed:
                    session = await manager.session(group, *key)
                    await manager.ready(session)
                    found[key] = session
                result["failed"], result["never_delivered"] = _settle(session, settlement)
            except MQError as exc:
                set_error(result, exc)
                continue
            touched.setdefault(id(session), (session, []))[1].append(result)
    for session, _ in touched.values():
        manager.after_change(session)
    queued()  # settled: its connection's next request may start
    for session, settled in touched.values():
        try:
            await manager.durable(session)
        except MQError as exc:
            for result in settled:
                set_error(result, exc)
    return cast(AckResponse, {"topics": topics})


def _settle(session: Session, settlement: Any) -> tuple[list[int], list[int]]:
    """Apply a partition's settlements; returns the offsets refused and, of those, the
    ones whose receipt names a delivery that never happened."""
    offsets, counts = settlement["offsets"], settlement["counts"]
    if len(offsets) != len(counts):
        raise InvalidReceiptError(f"{len(offsets)} offsets but {len(counts)} delivery counts")
    share, action, ms = session.share, settlement["action"], settlement["ms"]
    now = int(time.time() * 1000)
    failed: list[int] = []
    never: list[int] = []
    for offset, count in zip(offsets, counts, strict=True):
        try:
            if action == ACK:
                share.ack(offset, count, now)
            elif action == RELEASE:
                share.release(offset, count, now, ms, settlement["error"])
            elif action == REJECT:
                share.reject(offset, count, now, settlement["error"])
            elif action == EXTEND:
                share.extend(offset, count, now, ms)
        except InvalidReceiptError:
            failed.append(offset)
            if share.never_delivered(offset, count):
                never.append(offset)
    return failed, never


async def describe_queue(
    broker: Broker, ctx: RequestContext, body: DescribeQueueRequest
) -> DescribeQueueResponse:
    manager = _manager(broker)
    partitions: list[dict[str, Any]] = []
    for index in dict.fromkeys(body["partitions"]):  # a partition asked twice: answered once
        result: dict[str, Any] = {"partition": index, "error": 0, "message": None}
        partitions.append(result)
        try:
            session = await manager.session(body["group"], body["topic"], index)
            attributes, backlog = manager.attributes(session)
        except MQError as exc:
            set_error(result, exc)
            continue
        share = session.share
        result.update(
            visible=attributes.visible + backlog,
            delayed=attributes.delayed,
            in_flight=attributes.in_flight,
            dead_lettering=attributes.dead_lettering,
            acked=share.acked,
            dead_lettered=share.dead_lettered,
            deduplicated=share.deduplicated,
            oldest_visible_ms=(
                attributes.oldest_visible_ms if attributes.oldest_visible_ms is not None else -1
            ),
            start=share.start,
            end=session.partition.high_watermark,
        )
    return cast(DescribeQueueResponse, {"partitions": partitions})

"""The consumer's group membership and its rebalance listener, against a scripted coordinator.

No broker and no sockets: ``GroupMember._call`` is replaced by a script that
answers heartbeats as the coordinator would and records every request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pytest

from mq import ConsumerRebalanceListener
from mq.client.client import Client
from mq.client.consumer import Consumer
from mq.client.fetcher import Fetcher
from mq.client.group import GroupMember
from mq.client.types import TopicPartition
from mq.errors import UnknownMemberIdError
from mq.records.records import build_batch
from mq.wire.apis_groups import HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT

TOPIC = "t"


def tps(*partitions: int) -> set[TopicPartition]:
    return {TopicPartition(TOPIC, p) for p in partitions}


class Coordinator:
    """Answers a member's requests: heartbeats grant all of ``assignment`` and revoke the rest."""

    def __init__(self, member: GroupMember) -> None:
        self.member = member
        self.assignment: set[TopicPartition] = set()
        self.requests: list[tuple[str, Any]] = []
        self.error: Exception | None = None
        member._call = self.call  # type: ignore[method-assign]

    async def call(self, api: Any, body: Any) -> Any:
        self.requests.append((api.name, body))
        if self.error is not None:
            raise self.error
        if api is HEARTBEAT:
            owned = {TopicPartition(t, p) for t, parts in body["owned"].items() for p in parts}
            return {
                "generation_id": 1,
                "assignment": by_topic(self.assignment),
                "revoke": by_topic(owned - self.assignment),
                "heartbeat_interval_ms": 100,
            }
        if api is OFFSET_COMMIT:
            return {
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition": p["partition"], "error": 0, "message": None}
                            for p in t["partitions"]
                        ],
                    }
                    for t in body["topics"]
                ]
            }
        if api is LEAVE_GROUP:
            return {}
        raise AssertionError(f"unexpected {api.name}")

    def commits(self) -> list[dict[TopicPartition, int]]:
        return [
            {
                TopicPartition(t["name"], p["partition"]): p["offset"]
                for t in body["topics"]
                for p in t["partitions"]
            }
            for name, body in self.requests
            if name == OFFSET_COMMIT.name
        ]


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def member(*, auto_commit: bool = False) -> tuple[GroupMember, Fetcher, Coordinator]:
    client = Client("127.0.0.1:1")
    fetcher = Fetcher(client, auto_offset_reset="earliest")
    group = GroupMember(
        client,
        fetcher,
        group_id="g",
        group_instance_id=None,
        session_timeout_s=10,
        rebalance_timeout_s=10,
        heartbeat_interval_s=1,
        assignor="sticky",
        auto_commit_interval_s=5 if auto_commit else None,
        retry_backoff_s=0.01,
    )
    group.member_id, group.generation = "m", 1
    return group, fetcher, Coordinator(group)


def feed(fetcher: Fetcher, tp: TopicPartition, count: int) -> None:
    """``count`` records at offsets 0.. for ``tp``, as a fetch response would bring them."""
    state = fetcher.states[tp]
    state.seek(0)
    records = build_batch([(None, b"%d" % i, [], 0) for i in range(count)], base_offset=0)
    response: Any = {
        "topics": [
            {
                "name": tp.topic,
                "partitions": [
                    {
                        "partition": tp.partition,
                        "error": 0,
                        "message": None,
                        "high_watermark": count,
                        "records": bytes(records),
                    }
                ],
            }
        ]
    }
    fetcher._take_response(response, {tp: (state, state.epoch, state.fetch_offset)})


class Recorder(ConsumerRebalanceListener):
    """Records each call, with what the fetcher would hand out at that moment."""

    def __init__(self, fetcher: Fetcher) -> None:
        self.fetcher = fetcher
        self.calls: list[tuple[str, set[TopicPartition]]] = []
        self.handed_out: list[set[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", revoked))
        self.handed_out.append(set(self.fetcher.take(None, 1_000)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", assigned))
        assert assigned <= set(self.fetcher.states), "assigned partitions are in the assignment"
        assert assigned <= self.fetcher.held, "nothing of them is fetched before the callback"


async def test_the_listener_hears_only_what_changes_and_kept_partitions_keep_flowing() -> None:
    group, fetcher, coordinator = member()
    listener = group.listener = Recorder(fetcher)
    coordinator.assignment = tps(0, 1, 2)
    await group._heartbeat()
    assert listener.calls == [("assigned", tps(0, 1, 2))]
    assert fetcher.held == set()
    for tp in tps(0, 1, 2):
        feed(fetcher, tp, 5)

    coordinator.assignment = tps(0, 1, 3)  # 2 goes, 3 (free) comes, 0 and 1 stay
    await group._heartbeat()
    assert listener.calls[1:] == [("revoked", tps(2)), ("assigned", tps(3))]
    assert listener.handed_out == [tps(0, 1)]  # 2 was held during the callback, 0 and 1 were not
    assert set(fetcher.states) == group.owned == tps(0, 1, 3)
    assert fetcher.held == set()
    await group._heartbeat()  # stable: no callback
    assert len(listener.calls) == 3


async def test_a_revoked_partition_is_held_so_the_commit_is_what_was_handed_out() -> None:
    group, fetcher, coordinator = member(auto_commit=True)
    positions: list[int | None] = []

    class Greedy(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            # The application keeps taking records while the callback runs.
            assert fetcher.take(None, 100) == {}
            positions.append(fetcher.states[TopicPartition(TOPIC, 0)].position)

        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            pass

    group.listener = Greedy()
    coordinator.assignment = tps(0)
    await group._heartbeat()
    feed(fetcher, TopicPartition(TOPIC, 0), 10)
    assert len(fetcher.take(None, 4)[TopicPartition(TOPIC, 0)]) == 4
    coordinator.assignment = set()
    await group._heartbeat()
    assert positions == [4]
    assert coordinator.commits() == [{TopicPartition(TOPIC, 0): 4}]


async def test_a_failing_callback_is_logged_and_the_rebalance_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    group, fetcher, coordinator = member()

    class Failing(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            raise RuntimeError("boom")

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            raise RuntimeError("bang")

    group.listener = Failing()
    coordinator.assignment = tps(0, 1)
    with caplog.at_level(logging.ERROR, logger="mq.client.listener"):
        await group._heartbeat()
        coordinator.assignment = tps(1)
        await group._heartbeat()
    assert group.owned == tps(1)
    assert set(fetcher.states) == tps(1)
    assert fetcher.held == set()
    failures = [r.getMessage() for r in caplog.records]
    assert failures == [
        "group g: the rebalance listener's on_partitions_assigned failed",
        "group g: the rebalance listener's on_partitions_revoked failed",
    ]


async def test_lost_partitions_go_to_on_partitions_lost_which_defaults_to_revoked() -> None:
    group, fetcher, coordinator = member()
    listener = group.listener = Recorder(fetcher)
    coordinator.assignment = tps(0, 1)
    await group._heartbeat()
    coordinator.error = UnknownMemberIdError("expelled")
    with pytest.raises(UnknownMemberIdError):
        await group._heartbeat()
    await group._lose_all()  # what the membership loop does on that error
    assert listener.calls[-1] == ("revoked", tps(0, 1))
    assert fetcher.states == {}

    class Careful(Recorder):
        def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
            self.calls.append(("lost", lost))

    group, fetcher, coordinator = member()
    careful = group.listener = Careful(fetcher)
    coordinator.assignment = tps(0)
    await group._heartbeat()
    await group._lose_all()
    assert careful.calls == [("assigned", tps(0)), ("lost", tps(0))]
    assert coordinator.commits() == []


async def test_stop_revokes_everything_before_the_last_commit_and_the_leave() -> None:
    group, fetcher, coordinator = member(auto_commit=True)
    listener = group.listener = Recorder(fetcher)
    coordinator.assignment = tps(0, 1)
    await group._heartbeat()
    feed(fetcher, TopicPartition(TOPIC, 1), 3)
    coordinator.requests.clear()
    await group.stop()
    assert listener.calls[-1] == ("revoked", tps(0, 1))
    assert listener.handed_out[-1] == set()  # everything is held while it runs
    assert [name for name, _ in coordinator.requests] == [OFFSET_COMMIT.name, LEAVE_GROUP.name]


def test_subscribe_wants_a_consumer_rebalance_listener() -> None:
    consumer = Consumer(group_id="g")
    with pytest.raises(TypeError, match="ConsumerRebalanceListener"):
        consumer.subscribe(["t"], listener=print)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ConsumerRebalanceListener()  # type: ignore[abstract]

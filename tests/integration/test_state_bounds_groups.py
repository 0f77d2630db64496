"""Issue 18, F7: the consumer-group state a client can create is bounded and freed.

A real broker in the test's event loop (:mod:`inprocess_broker`) gets real
join_group / leave_group requests; the tests then count what its coordinator
keeps. Each bound is configured small so that a test reaches it in a few requests.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import running_broker

from mq.client.client import Client
from mq.errors import (
    CoordinatorLoadInProgressError,
    GroupMaxSizeReachedError,
    InvalidRequestError,
    NotCoordinatorError,
)
from mq.wire.apis_groups import JOIN_GROUP, LEAVE_GROUP

TEST_TIMEOUT_S = 60
READY_WAIT_S = 20


def join_body(group: str, topics: list[str], instance: str | None = None) -> dict[str, Any]:
    return {
        "group_id": group,
        "member_id": "",
        "group_instance_id": instance,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "topics": topics,
        "assignor": "sticky",
    }


@asynccontextmanager
async def connect(bootstrap: str) -> AsyncIterator[Client]:
    client = Client(bootstrap)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def join(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    """join_group, retried (bounded) while the offsets partitions are loading."""
    deadline = time.monotonic() + READY_WAIT_S
    while True:
        try:
            return dict(await client.call_any(JOIN_GROUP, body))
        except (CoordinatorLoadInProgressError, NotCoordinatorError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_a_member_subscribing_to_too_many_topics_is_refused(tmp_path: Path) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path, group_max_topics_per_member=50) as running:
            async with connect(running.bootstrap) as client:
                await join(client, join_body("ok", [f"t{i}" for i in range(50)]))
                with pytest.raises(InvalidRequestError, match="group_max_topics_per_member"):
                    await join(client, join_body("big", [f"t{i}" for i in range(51)]))
            coordinator = running.broker.coordinator
            assert coordinator is not None
            assert "big" not in coordinator.groups  # nothing kept for the refused join
            assert len(coordinator.groups["ok"].topics) == 50


async def test_a_group_is_bounded_in_members_static_rejoins_excepted(tmp_path: Path) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with (
            running_broker(tmp_path, group_max_size=3) as running,
            connect(running.bootstrap) as client,
        ):
            for i in range(3):
                await join(client, join_body("g", ["a"], instance=f"i{i}"))
            with pytest.raises(GroupMaxSizeReachedError, match="group_max_size"):
                await join(client, join_body("g", ["a"]))
            # a static member coming back replaces itself: the group does not grow
            again = await join(client, join_body("g", ["a"], instance="i0"))
            coordinator = running.broker.coordinator
            assert coordinator is not None
            group = coordinator.groups["g"]
            assert len(group.members) == 3
            assert again["member_id"] in group.members
            # once one leaves, there is room again
            await client.call_any(
                LEAVE_GROUP, {"group_id": "g", "member_id": "", "group_instance_id": "i1"}
            )
            await join(client, join_body("g", ["a"]))
            assert len(group.members) == 3


async def test_groups_per_broker_are_bounded_and_an_emptied_group_is_freed(
    tmp_path: Path,
) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path, max_groups=2) as running:
            coordinator = running.broker.coordinator
            assert coordinator is not None
            async with connect(running.bootstrap) as client:
                first = await join(client, join_body("g1", ["a"]))
                await join(client, join_body("g2", ["a"]))
                with pytest.raises(GroupMaxSizeReachedError, match="max_groups"):
                    await join(client, join_body("g3", ["a"]))
                assert "g3" not in coordinator.groups
                # the second member of an existing group is not a new group
                await join(client, join_body("g2", ["b"]))
                await client.call_any(
                    LEAVE_GROUP,
                    {"group_id": "g1", "member_id": first["member_id"], "group_instance_id": None},
                )
                assert "g1" not in coordinator.groups  # freed with its last member
                await join(client, join_body("g3", ["a"]))
                assert sorted(coordinator.groups) == ["g2", "g3"]


async def test_fenced_member_ids_are_bounded(tmp_path: Path) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path, group_max_size=4) as running:
            async with connect(running.bootstrap) as client:
                for _ in range(20):  # a static member restarting over and over
                    await join(client, join_body("g", ["a"], instance="same"))
            coordinator = running.broker.coordinator
            assert coordinator is not None
            group = coordinator.groups["g"]
            assert len(group.members) == 1
            assert len(group.fenced) <= 4


async def test_an_expired_members_state_is_freed(tmp_path: Path) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path) as running:
            coordinator = running.broker.coordinator
            assert coordinator is not None
            async with connect(running.bootstrap) as client:
                body = join_body(f"g-{uuid.uuid4().hex[:6]}", [f"t{i}" for i in range(100)])
                body["session_timeout_ms"] = 1_000
                await join(client, body)
                assert body["group_id"] in coordinator.groups
                for _ in range(100):  # the session (1 s) ends, the expiry tick (0.1 s) sees it
                    if body["group_id"] not in coordinator.groups:
                        break
                    await asyncio.sleep(0.1)
                assert body["group_id"] not in coordinator.groups


async def test_the_groups_topic_counts_follow_joins_and_leaves(tmp_path: Path) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path) as running, connect(running.bootstrap) as client:
            coordinator = running.broker.coordinator
            assert coordinator is not None
            ids = []
            for i in range(6):
                joined = await join(client, join_body("g", [f"t{i % 3}", "all"]))
                ids.append(joined["member_id"])
            for member_id in ids[:4]:
                await client.call_any(
                    LEAVE_GROUP,
                    {"group_id": "g", "member_id": member_id, "group_instance_id": None},
                )
            group = coordinator.groups["g"]
            expected = Counter(t for m in group.members.values() for t in m.topics)
            assert group.topics == expected == Counter({"all": 2, "t1": 1, "t2": 1})


async def test_subscription_entries_over_all_groups_are_bounded(tmp_path: Path) -> None:
    """Members times topics is what a coordinator's memory grows with: one budget for all
    groups (one entry per member plus one per topic)."""
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        running_broker(tmp_path, max_group_subscriptions=25) as running,
        connect(running.bootstrap) as client,
    ):
        coordinator = running.broker.coordinator
        assert coordinator is not None
        a = await join(client, join_body("a", [f"t{i}" for i in range(9)]))  # 10 entries
        await join(client, join_body("b", [f"t{i}" for i in range(9)]))  # 20
        with pytest.raises(GroupMaxSizeReachedError, match="max_group_subscriptions"):
            await join(client, join_body("c", [f"t{i}" for i in range(5)]))  # 26
        await join(client, join_body("c", [f"t{i}" for i in range(4)]))  # 25
        assert coordinator.entries == 25
        # a member rejoining with fewer topics gives entries back
        smaller = join_body("a", ["t0"])
        smaller["member_id"] = a["member_id"]
        await join(client, smaller)
        assert coordinator.entries == 17
        for group_id in ("a", "b", "c"):
            for member_id in list(coordinator.groups[group_id].members):
                await client.call_any(
                    LEAVE_GROUP,
                    {"group_id": group_id, "member_id": member_id, "group_instance_id": None},
                )
        assert coordinator.entries == 0
        assert coordinator.groups == {}

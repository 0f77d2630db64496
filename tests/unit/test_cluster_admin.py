"""Reassignment and leader election from the CLI down to the controller seat, with stand-ins.

The handlers run against a stand-in seat (their answers must pass the
response schemas), the admin client against a stand-in connection (it sends
valid requests and raises per-partition errors), and ``mq cluster rebalance``
against a stand-in admin.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner
from mq_cli.rebalance import rebalance
from mq_cli.topic import topic

import mq
from mq.broker import handlers_cluster
from mq.broker.context import RequestContext
from mq.client.admin import Admin, ClusterDescription, PartitionDescription, PartitionReassignment
from mq.errors import (
    ElectionNotNeededError,
    InvalidReplicaAssignmentError,
    MQError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
)
from mq.replication.placement import PartitionState
from mq.wire.apis_cluster import (
    ALTER_PARTITION_REASSIGNMENTS,
    ELECT_LEADERS,
    LIST_PARTITION_REASSIGNMENTS,
)
from mq.wire.registry import Api

CTX = RequestContext(1, "test")
Key = tuple[str, int]


class _Seat:
    controller = SimpleNamespace(node_id=1, epoch=1)

    def __init__(self) -> None:
        self.moves: Mapping[Key, Sequence[int] | None] = {}
        self.elected: Iterable[Key] | None = None

    async def reassign_partitions(
        self, moves: Mapping[Key, Sequence[int] | None]
    ) -> dict[Key, MQError | None]:
        self.moves = moves
        return {
            key: None if target else InvalidReplicaAssignmentError("empty")
            for key, target in moves.items()
        }

    async def elect_preferred_leaders(self, partitions: Iterable[Key] | None) -> Any:
        self.elected = partitions
        return {("b", 1): None, ("a", 0): PreferredLeaderNotAvailableError("2 is not alive")}

    def list_reassignments(self) -> dict[Key, PartitionState]:
        return {
            ("a", 0): PartitionState((3, 2, 1), 1, 0, (1, 2), (3,), (1,)),
            ("b", 0): PartitionState((4, 1), 1, 0, (1,), (4,), ()),
        }


def broker_with(seat: _Seat | None) -> Any:
    return SimpleNamespace(seat=seat, config=SimpleNamespace(node_id=7))


def checked(api: Api[Any, Any], body: Any) -> Any:
    return api.response.validate(copy.deepcopy(body), 0, api.name)


async def test_the_handlers_answer_per_partition() -> None:
    seat = _Seat()
    broker = broker_with(seat)
    body: Any = {
        "topics": [{"name": "a", "partitions": [{"partition": 0, "replicas": [3, 2]}]}],
        "timeout_ms": 0,
    }
    body["topics"][0]["partitions"].append({"partition": 1, "replicas": []})
    answer = await handlers_cluster.alter_partition_reassignments(broker, CTX, body)
    assert seat.moves == {("a", 0): [3, 2], ("a", 1): []}
    assert checked(ALTER_PARTITION_REASSIGNMENTS, answer) == {
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {"partition": 0, "error": 0, "message": None},
                    {"partition": 1, "error": 39, "message": "empty"},
                ],
            }
        ]
    }

    answer = await handlers_cluster.elect_leaders(broker, CTX, {"topics": None, "timeout_ms": 0})
    assert seat.elected is None
    assert [t["name"] for t in checked(ELECT_LEADERS, answer)["topics"]] == ["a", "b"]
    await handlers_cluster.elect_leaders(
        broker, CTX, {"topics": [{"name": "b", "partitions": [1]}], "timeout_ms": 0}
    )
    assert seat.elected == [("b", 1)]

    listed = await handlers_cluster.list_partition_reassignments(
        broker, CTX, {"topics": [{"name": "a", "partitions": [0, 5]}], "timeout_ms": 0}
    )
    assert checked(LIST_PARTITION_REASSIGNMENTS, listed) == {
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {"partition": 0, "replicas": [3, 2, 1], "adding": [3], "removing": [1]}
                ],
            }
        ]
    }


async def test_the_handlers_refuse_off_the_controller() -> None:
    with pytest.raises(NotControllerError):
        await handlers_cluster.list_partition_reassignments(
            broker_with(None), CTX, {"topics": None, "timeout_ms": 0}
        )


class _Client:
    def __init__(self, response: Any) -> None:
        self.response = response
        self.sent: list[tuple[str, Any]] = []

    async def call_any(self, api: Api[Any, Any], body: Any) -> Any:
        api.request.validate(copy.deepcopy(body), 0, api.name)  # a valid request
        self.sent.append((api.name, body))
        return self.response


def admin_with(response: Any) -> tuple[Admin, _Client]:
    admin = Admin.__new__(Admin)
    client = _Client(response)
    admin._client = client  # type: ignore[assignment]
    admin._timeout_ms = 1000
    return admin, client


def results(*parts: tuple[str, int, int]) -> Any:
    topics: dict[str, list[Any]] = {}
    for name, index, code in parts:
        topics.setdefault(name, []).append({"partition": index, "error": code, "message": "m"})
    return {"topics": [{"name": n, "partitions": p} for n, p in topics.items()]}


async def test_the_admin_client_sends_valid_requests_and_raises_per_partition() -> None:
    admin, client = admin_with(results(("a", 0, 0), ("a", 1, 39)))
    with pytest.raises(InvalidReplicaAssignmentError, match="m"):
        await admin.reassign_partitions(
            {mq.TopicPartition("a", 0): (1, 2), mq.TopicPartition("a", 1): None}
        )
    assert client.sent[0][1]["topics"] == [
        {
            "name": "a",
            "partitions": [
                {"partition": 0, "replicas": [1, 2]},
                {"partition": 1, "replicas": None},
            ],
        }
    ]

    admin, client = admin_with(results(("a", 0, 0), ("b", 2, ElectionNotNeededError.code)))
    assert await admin.elect_leaders() == [mq.TopicPartition("a", 0)]
    assert client.sent[0][1]["topics"] is None
    admin, _ = admin_with(results(("a", 0, PreferredLeaderNotAvailableError.code)))
    with pytest.raises(PreferredLeaderNotAvailableError):
        await admin.elect_leaders([mq.TopicPartition("a", 0)])

    ongoing = {
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {"partition": 0, "replicas": [3, 2, 1], "adding": [3], "removing": [1]}
                ],
            }
        ]
    }
    admin, client = admin_with(ongoing)
    listed = await admin.list_reassignments([mq.TopicPartition("a", 0)])
    assert listed == {mq.TopicPartition("a", 0): PartitionReassignment((3, 2, 1), (3,), (1,))}
    assert listed[mq.TopicPartition("a", 0)].target == (3, 2)
    assert client.sent[0][1]["topics"] == [{"name": "a", "partitions": [0]}]


class _Admin:
    """What ``mq cluster rebalance`` asks of the admin client."""

    moved: ClassVar[dict[mq.TopicPartition, Sequence[int] | None]] = {}
    elections = 0

    def __init__(self, bootstrap: str) -> None:
        pass

    async def __aenter__(self) -> _Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def describe_cluster(self) -> ClusterDescription:
        partitions = [
            PartitionDescription(p, r[0], 0, r, r) for p, r in enumerate([(1, 2), (2, 1)])
        ]
        return ClusterDescription("c", 1, [1, 2, 3], {"t": partitions})

    async def list_reassignments(self) -> dict[mq.TopicPartition, PartitionReassignment]:
        return {}

    async def reassign_partitions(self, moves: dict[mq.TopicPartition, Sequence[int]]) -> None:
        _Admin.moved = dict(moves)

    async def elect_leaders(self) -> list[mq.TopicPartition]:
        _Admin.elections += 1
        raise PreferredLeaderNotAvailableError("3 is not in sync yet")


def test_rebalance_prints_the_plan_and_submits_it_unless_dry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mq, "Admin", _Admin)
    dry = CliRunner().invoke(rebalance, ["--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.splitlines() == [
        "TOPIC  PARTITION  REPLICAS  NEW REPLICAS",
        "t      0          1,2       3,2",
        "dry run: 1 partitions would move",
    ]
    assert _Admin.moved == {}
    done = CliRunner().invoke(rebalance, [])
    assert done.exit_code == 0, done.output
    assert _Admin.moved == {mq.TopicPartition("t", 0): (3, 2)}
    assert _Admin.elections == 1
    assert "PREFERRED_LEADER_NOT_AVAILABLE" in done.output


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["reassign", "t", "-p", "0"], "either --replicas"),
        (["reassign", "t", "-p", "0", "--replicas", "1", "--cancel"], "either --replicas"),
        (["reassign", "t", "-p", "0", "--replicas", "1,x"], "not a list of node ids"),
    ],
)
def test_topic_reassign_checks_its_options(args: list[str], match: str) -> None:
    result = CliRunner().invoke(topic, args)
    assert result.exit_code == 2
    assert match in result.output

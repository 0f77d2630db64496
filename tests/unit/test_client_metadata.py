"""The cluster metadata cache: updates, queries and the refresh schedule (fake clock)."""

from __future__ import annotations

from typing import Any

import pytest

from mq.client.metadata import ClusterMetadata, needs_metadata_refresh
from mq.client.types import TopicPartition
from mq.errors import (
    InvalidTopicError,
    LeaderNotAvailableError,
    NetworkError,
    NotLeaderOrFollowerError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from mq.wire.apis_core import MetadataResponse


def partition(index: int, leader: int, error: int = 0) -> dict[str, Any]:
    return {
        "partition": index,
        "error": error,
        "leader": leader,
        "leader_epoch": 3,
        "replicas": [1, 2],
        "isr": [1],
        "offline_replicas": [],
    }


def response(topics: dict[str, list[dict[str, Any]] | int]) -> MetadataResponse:
    return {
        "cluster_id": "c",
        "controller_id": 1,
        "brokers": [
            {"node_id": 1, "host": "h1", "port": 1, "rack": None},
            {"node_id": 2, "host": "h2", "port": 2, "rack": "r"},
        ],
        "topics": [
            {"name": name, "error": parts, "internal": False, "partitions": []}
            if isinstance(parts, int)
            else {"name": name, "error": 0, "internal": name.startswith("__"), "partitions": parts}
            for name, parts in topics.items()
        ],
    }


def test_update_and_queries() -> None:
    md = ClusterMetadata()
    md.update(response({"t": [partition(1, 2), partition(0, 1)], "gone": 3, "__internal": []}), 0.0)
    assert md.partitions_for("t") == [0, 1]
    assert md.leader_for(TopicPartition("t", 1)) == 2
    assert md.leader_for(TopicPartition("t", 7)) is None
    assert md.leader_for(TopicPartition("nope", 0)) is None
    assert md.partitions_for("gone") is None
    assert md.topic_errors == {"gone": 3}
    assert md.broker(2) is not None
    assert md.broker(2).rack == "r"
    assert md.internal_topics == {"__internal"}
    info = md.partition(TopicPartition("t", 0))
    assert info is not None
    assert info.replicas == (1, 2)
    assert info.isr == (1,)
    tps = [TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("x", 0)]
    assert md.partitions_by_leader(tps) == {1: [tps[0]], 2: [tps[1]], None: [tps[2]]}


def test_leaderless_partitions_are_not_available() -> None:
    md = ClusterMetadata()
    md.update(response({"t": [partition(0, -1, error=5), partition(1, 1)]}), 0.0)
    assert md.available_partitions_for("t") == [1]
    assert md.missing(["t"]) == {"t"}
    md.update(response({"t": [partition(0, 9), partition(1, 1)]}), 1.0)
    assert md.missing(["t"]) == {"t"}  # node 9 is not a known broker
    md.update(response({"t": [partition(0, 2), partition(1, 1)]}), 2.0)
    assert md.missing(["t"]) == set()


def test_partial_updates_keep_other_topics_complete_ones_forget() -> None:
    md = ClusterMetadata()
    md.update(response({"a": [partition(0, 1)], "b": [partition(0, 1)]}), 0.0)
    md.update(response({"a": [partition(0, 2)]}), 1.0)
    assert md.topics() == {"a", "b"}
    assert md.leader_for(TopicPartition("a", 0)) == 2
    md.update(response({"a": [partition(0, 2)]}), 2.0, complete=True)
    assert md.topics() == {"a"}
    version = md.version
    md.update(response({}), 3.0)
    assert md.version == version + 1


def test_refresh_schedule_max_age_and_backoff() -> None:
    md = ClusterMetadata(max_age_s=60, backoff_s=0.1, backoff_max_s=0.4)
    assert md.time_to_next_update(0.0) == 0  # nothing known yet
    md.attempt_started(0.0)
    md.update(response({"t": [partition(0, 1)]}), 0.0, wanted=["t"])
    assert not md.update_requested
    assert md.time_to_next_update(10.0) == pytest.approx(50)
    assert md.time_to_next_update(61.0) == 0
    md.request_update()  # e.g. NOT_LEADER_OR_FOLLOWER
    assert md.time_to_next_update(10.0) == 0  # the last attempt is long ago
    assert md.time_to_next_update(0.05) == pytest.approx(0.05)
    for expected in (0.2, 0.4, 0.4):  # doubling, capped
        md.failed_update(20.0)
        assert md.time_to_next_update(20.0) == pytest.approx(expected)
    md.update(response({"t": [partition(0, 1)]}), 21.0, wanted=["t"])
    assert md.current_backoff() == pytest.approx(0.1)


def test_new_topics_skip_the_backoff_unless_the_last_refresh_failed() -> None:
    md = ClusterMetadata(backoff_s=0.1, backoff_max_s=1)
    md.update(response({"t": [partition(0, 1)]}), 0.0, wanted=["t"])
    md.request_update_for_new_topics()
    assert md.time_to_next_update(0.01) == 0  # the consumer's first fetch need not wait
    md.update(response({"t": [partition(0, 1)], "u": [partition(0, 1)]}), 0.02, wanted=["u"])
    md.request_update()
    assert md.time_to_next_update(0.03) == pytest.approx(0.09)  # stale: the backoff holds
    md.failed_update(0.05)
    md.request_update_for_new_topics()
    assert md.time_to_next_update(0.06) == pytest.approx(0.19)  # after a failure too


def test_a_wanted_topic_that_is_still_missing_keeps_a_refresh_requested() -> None:
    md = ClusterMetadata(backoff_s=0.1, backoff_max_s=1)
    md.update(response({"new": 3}), 0.0, wanted=["new"])
    assert md.update_requested
    assert md.time_to_next_update(0.0) == pytest.approx(0.2)
    md.update(response({"new": [partition(0, 1)]}), 1.0, wanted=["new"])
    assert not md.update_requested


@pytest.mark.parametrize(
    ("error", "refresh"),
    [
        (NotLeaderOrFollowerError(), True),
        (UnknownTopicOrPartitionError(), True),
        (LeaderNotAvailableError(), True),
        (NetworkError(), True),
        (RecordTooLargeError(), False),
        (InvalidTopicError(), False),
        (ValueError(), False),
    ],
)
def test_which_errors_mean_stale_metadata(error: BaseException, refresh: bool) -> None:
    assert needs_metadata_refresh(error) is refresh


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="max_age_s"):
        ClusterMetadata(max_age_s=0)

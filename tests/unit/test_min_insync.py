"""Internal topics require two in-sync replicas once they have two."""

from __future__ import annotations

from types import SimpleNamespace

from mq.broker.broker import Broker
from mq.replication.cluster_state import TopicRecord


def min_isr(topic: TopicRecord, replicas: int | None, default: int = 1) -> int:
    broker = SimpleNamespace(config=SimpleNamespace(min_insync_replicas=default))
    return Broker.min_insync_replicas(broker, topic, replicas)  # type: ignore[arg-type]


def test_internal_topics_need_two_in_sync_replicas_when_they_have_two() -> None:
    internal = TopicRecord("__share_state", "id", 10, {}, internal=True)
    assert [min_isr(internal, n) for n in (1, 2, 3)] == [1, 2, 2]
    assert min_isr(internal, 3, default=3) == 3  # a stricter broker default wins
    user = TopicRecord("events", "id", 3, {})
    assert [min_isr(user, n) for n in (1, 3)] == [1, 1]
    explicit = TopicRecord("__consumer_offsets", "id", 3, {"min.insync.replicas": "3"}, True)
    assert min_isr(explicit, 3) == 3

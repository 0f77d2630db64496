"""The share partitions a broker keeps loaded: LRU order, counts per partition, victims."""

from __future__ import annotations

from mq.broker.share_sessions import PRESSURE_MIN_IDLE_S, SessionTable
from mq.broker.share_store import ShareKey


def key(group: str, topic: str = "t", partition: int = 0) -> ShareKey:
    return ShareKey(group, topic, partition)


def test_counts_per_partition_follow_puts_and_removes() -> None:
    table: SessionTable[str] = SessionTable()
    table.put(key("a"), "a", 0)
    table.put(key("b"), "b", 0)
    table.put(key("c", partition=1), "c", 0)
    table.put(key("a"), "a2", 1)  # replacing does not count twice
    assert len(table) == 3
    assert table.on_partition("t", 0) == 2
    assert table.on_partition("t", 1) == 1
    table.remove(key("a"))
    table.remove(key("a"))  # removing twice is harmless
    assert table.on_partition("t", 0) == 1
    assert table.get(key("a")) is None
    assert table.get(key("b")) == "b"


def test_idle_lists_the_least_recently_used_first_and_stops_at_a_recent_one() -> None:
    table: SessionTable[str] = SessionTable()
    for i, name in enumerate("abcd"):
        table.put(key(name), name, float(i))
    table.touch(key("a"), 10.0)  # a becomes the most recently used
    assert table.values() == ["b", "c", "d", "a"]
    assert table.idle(now=12.0, idle_s=9.5) == ["b", "c"]
    assert table.idle(now=12.0, idle_s=1.0) == ["b", "c", "d", "a"]


def test_a_victim_is_the_oldest_evictable_one_and_never_a_recent_one() -> None:
    table: SessionTable[str] = SessionTable()
    table.put(key("busy"), "busy", 0.0)
    table.put(key("other", partition=1), "other", 0.5)
    table.put(key("idle"), "idle", 1.0)
    now = 1.0 + PRESSURE_MIN_IDLE_S
    assert table.victim(now, lambda v: v != "busy") == "other"
    assert table.victim(now, lambda v: v != "busy", ("t", 0)) == "idle"
    assert table.victim(now, lambda v: False) is None
    # used just now: not a victim, even if evictable
    assert table.victim(0.9, lambda v: True, ("t", 0)) is None

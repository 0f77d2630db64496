"""The broker's request counters: per-API meters, a connection's cached usage, the cap."""

from __future__ import annotations

from mq.broker.metrics import LATENCY_BUCKETS_S, OTHER, ClientUsage, Meters


def test_requests_are_counted_per_api_and_error_with_their_latency() -> None:
    meters = Meters(max_labelled=10)
    usage = ClientUsage(meters).of("User:alice", "app")
    meters.request("produce", "none", 0.0004, usage)
    meters.request("produce", "none", 0.003, usage)
    meters.request("produce", "NOT_LEADER", 0.0001, usage)
    meters.request("fetch", "none", 20.0, usage)
    assert meters.requests == {
        ("produce", "none"): 2,
        ("produce", "NOT_LEADER"): 1,
        ("fetch", "none"): 1,
    }
    produce = meters.latency["produce"]
    assert produce.sum == 0.0004 + 0.003 + 0.0001
    cumulative = dict(produce.cumulative())
    assert cumulative[repr(LATENCY_BUCKETS_S[0])] == 2  # 0.1 ms and 0.4 ms <= 0.5 ms
    assert cumulative["0.005"] == 3
    assert cumulative["+Inf"] == 3
    assert dict(meters.latency["fetch"].cumulative())["10.0"] == 0
    assert meters.usage[("User:alice", "app")].requests == 4


def test_a_connection_looks_its_usage_up_once_per_identity() -> None:
    meters = Meters(max_labelled=2)
    cached = ClientUsage(meters)
    anonymous = cached.of("User:ANONYMOUS", None)
    assert cached.of("User:ANONYMOUS", None) is anonymous
    assert meters.usage == {("User:ANONYMOUS", ""): anonymous}
    alice = cached.of("User:alice", None)  # authenticated: another principal
    assert alice is not anonymous
    assert meters.usage[("User:alice", "")] is alice
    third = cached.of("User:alice", "app")  # past the cap: folded into __other__
    assert meters.usage[(OTHER, OTHER)] is third
    assert meters.overflow["mq_client_requests_total"] == 1

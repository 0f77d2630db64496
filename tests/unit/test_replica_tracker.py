"""The leader's bookkeeping of its followers (high watermark, ISR candidates) and the
catch-up token bucket: pure functions of what they are told, with the clock passed in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mq.replication.throttle import TokenBucket
from mq.replication.tracker import ReplicaTracker

LAG_MS = 1_000


def _tracker(
    leader_end: int = 100, hw: int = 0, isr: tuple[int, ...] = (1, 2, 3)
) -> ReplicaTracker:
    return ReplicaTracker(
        1, (1, 2, 3), isr, leader_end=leader_end, high_watermark=hw, epoch_start=50, now_ms=0
    )


def test_the_high_watermark_is_the_smallest_log_end_of_the_isr() -> None:
    tracker = _tracker()
    assert tracker.high_watermark == 0  # the followers' log ends are unknown yet
    assert not tracker.follower_fetched(2, 80, now_ms=10)
    assert tracker.follower_fetched(3, 60, now_ms=10)
    assert tracker.high_watermark == 60
    assert tracker.follower_fetched(3, 100, now_ms=20)
    assert tracker.high_watermark == 80


def test_a_leader_alone_in_the_isr_moves_the_high_watermark_as_it_appends() -> None:
    tracker = _tracker(isr=(1,))
    assert tracker.high_watermark == 100
    assert tracker.leader_appended(120)
    assert tracker.high_watermark == 120


def test_the_high_watermark_never_goes_back() -> None:
    tracker = _tracker(hw=0)
    tracker.follower_fetched(2, 90, now_ms=1)
    tracker.follower_fetched(3, 90, now_ms=1)
    assert tracker.high_watermark == 90
    tracker.follower_fetched(2, 40, now_ms=2)  # a follower that truncated and asks again
    assert tracker.high_watermark == 90


def test_a_follower_outside_the_isr_does_not_hold_the_high_watermark() -> None:
    tracker = _tracker(isr=(1, 2))
    tracker.follower_fetched(2, 100, now_ms=1)
    assert tracker.high_watermark == 100  # node 3 has not fetched at all


def test_a_follower_not_caught_up_for_the_lag_time_is_lagging() -> None:
    tracker = _tracker()
    tracker.follower_fetched(2, 100, now_ms=100)  # asks for the log end: caught up
    tracker.follower_fetched(3, 10, now_ms=100)  # far behind
    assert tracker.lagging(now_ms=900, lag_max_ms=LAG_MS) == set()  # everyone had a grace period
    assert tracker.lagging(now_ms=1_050, lag_max_ms=LAG_MS) == {3}
    tracker.follower_fetched(2, 100, now_ms=1_500)
    assert tracker.lagging(now_ms=2_000, lag_max_ms=LAG_MS) == {3}


def test_a_follower_that_had_what_the_leader_had_at_its_previous_fetch_was_caught_up_then() -> None:
    tracker = _tracker()
    tracker.follower_fetched(2, 100, now_ms=0)
    tracker.leader_appended(200)  # the leader moves on while the follower copies
    tracker.follower_fetched(2, 100, now_ms=400)  # had the log end as of its fetch at 0
    tracker.leader_appended(300)
    tracker.follower_fetched(2, 200, now_ms=800)  # had it as of 400
    assert tracker.lagging(now_ms=1_300, lag_max_ms=LAG_MS) == {3}  # 3 never fetched
    assert 2 not in tracker.lagging(now_ms=1_300, lag_max_ms=LAG_MS)


def test_a_follower_outside_the_isr_may_rejoin_once_it_has_the_high_watermark() -> None:
    tracker = _tracker(isr=(1, 2))
    tracker.follower_fetched(2, 100, now_ms=1)
    assert tracker.caught_up() == set()
    tracker.follower_fetched(3, 40, now_ms=1)  # below the epoch start: not yet
    assert tracker.caught_up() == set()
    tracker.follower_fetched(3, 100, now_ms=2)
    assert tracker.caught_up() == {3}
    tracker.set_isr((1, 2, 3), (1, 2, 3), now_ms=3)
    assert tracker.caught_up() == set()


def test_a_new_replica_set_adds_and_forgets_followers() -> None:
    tracker = _tracker(isr=(1, 2, 3))
    tracker.set_isr((1, 2), (1, 2, 4), now_ms=5)
    assert set(tracker.followers) == {2, 4}
    assert tracker.lagging(now_ms=5 + LAG_MS + 1, lag_max_ms=LAG_MS) == {2}


@given(st.lists(st.tuples(st.sampled_from([2, 3]), st.integers(0, 200)), max_size=30))
def test_the_high_watermark_is_at_most_every_isr_members_log_end(
    fetches: list[tuple[int, int]],
) -> None:
    tracker = _tracker(leader_end=200)
    latest = {2: -1, 3: -1}
    highest = 0
    for now, (node, offset) in enumerate(fetches):
        tracker.follower_fetched(node, offset, now_ms=now)
        latest[node] = offset
        highest = max(highest, min(200, *latest.values()))
        assert tracker.high_watermark == highest  # the best all have had, never less


def test_the_bucket_allows_a_rate_with_one_second_of_burst() -> None:
    bucket = TokenBucket(1_000, now=0.0)
    assert bucket.available(0.0) == 1_000
    bucket.take(1_500, 0.0)  # a batch may overdraw
    assert bucket.available(0.0) == 0
    assert bucket.available(0.4) == 0
    assert bucket.available(1.0) == 500
    assert bucket.available(10.0) == 1_000  # no more than a second's worth saved up

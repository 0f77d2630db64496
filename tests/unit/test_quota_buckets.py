"""The throttle bucket against an independent reference model (GCRA virtual scheduling,
in exact fractions), and the bound a client that honours its throttle times stays under."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.quotas.buckets import ThrottleBucket


class Gcra:
    """Generic cell rate algorithm: ``tat`` is when the meter would be empty again;
    the user is throttled for what lies beyond the allowed burst."""

    def __init__(self, rate: Fraction, burst_s: Fraction, now: Fraction) -> None:
        self.rate, self.burst_s = rate, burst_s
        self.tat = now - burst_s  # a full bucket: the burst is available

    def record(self, amount: Fraction, now: Fraction) -> Fraction:
        self.tat = max(self.tat, now - self.burst_s) + amount / self.rate
        return max(Fraction(0), self.tat - now)


steps = st.lists(
    st.tuples(
        st.integers(0, 3_000),  # milliseconds since the previous request
        st.integers(0, 50_000),  # units used
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(
    rate=st.integers(1, 100_000),
    burst_ms=st.integers(1, 5_000),
    schedule=steps,
)
def test_throttle_times_match_the_reference_model(
    rate: int, burst_ms: int, schedule: list[tuple[int, int]]
) -> None:
    burst = Fraction(burst_ms, 1000)
    now = Fraction(0)
    bucket = ThrottleBucket(rate, float(now), float(burst))
    model = Gcra(Fraction(rate), burst, now)
    for gap_ms, amount in schedule:
        now += Fraction(gap_ms, 1000)
        got = bucket.record(amount, float(now))
        want = model.record(Fraction(amount), now)
        assert got == pytest.approx(float(want), rel=1e-9, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(
    rate=st.integers(1, 10_000),
    burst_ms=st.integers(10, 2_000),
    amounts=st.lists(st.integers(0, 20_000), min_size=1, max_size=80),
    gaps=st.lists(st.integers(0, 500), min_size=80, max_size=80),
)
def test_a_client_that_honours_the_throttle_stays_within_rate_and_burst(
    rate: int, burst_ms: int, amounts: list[int], gaps: list[int]
) -> None:
    """Over any run, what was admitted is at most rate x elapsed + burst + the last request."""
    burst_s = burst_ms / 1000
    bucket = ThrottleBucket(rate, 0.0, burst_s)
    now = 0.0
    total = 0
    for amount, gap in zip(amounts, gaps, strict=False):
        total += amount
        wait = bucket.record(amount, now)
        assert total <= rate * now + rate * burst_s + amount + 1e-6 * max(1, total)
        now += wait + gap / 1000  # honours the throttle, then maybe idles


def test_debt_is_paid_back_in_exactly_the_throttle_time() -> None:
    bucket = ThrottleBucket(1000, 0.0, burst_s=1.0)
    assert bucket.record(1000, 0.0) == 0.0  # the burst
    assert bucket.record(500, 0.0) == pytest.approx(0.5)
    assert bucket.throttle_s(0.25) == pytest.approx(0.25)
    assert bucket.throttle_s(0.5) == 0.0
    assert bucket.tokens(10.0) == 1000  # capped at the depth


def test_a_new_rate_keeps_the_debt_and_caps_the_depth() -> None:
    bucket = ThrottleBucket(100, 0.0, burst_s=1.0)
    bucket.record(300, 0.0)  # 200 in debt
    bucket.set_rate(400, 0.0)
    assert bucket.throttle_s(0.0) == pytest.approx(0.5)
    bucket.set_rate(10, 100.0)
    assert bucket.tokens(100.0) == 10


def test_a_clock_that_steps_back_changes_nothing() -> None:
    bucket = ThrottleBucket(100, 5.0)
    bucket.record(150, 5.0)
    assert bucket.throttle_s(4.0) == pytest.approx(0.5)


@pytest.mark.parametrize(("rate", "burst"), [(0, 1.0), (-1, 1.0), (1, 0.0)])
def test_bad_parameters_are_refused(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ThrottleBucket(rate, 0.0, burst)
    with pytest.raises(ValueError, match="non-negative"):
        ThrottleBucket(1, 0.0).record(-1, 0.0)

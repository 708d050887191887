"""The one backoff rule: exponential, capped before it is computed, finite for any count."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from retinue.protocol.backoff import capped_exponential

SECONDS = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(start=SECONDS, cap=SECONDS, doublings=st.integers(-5, 10**6))
def test_the_delay_is_the_capped_power_and_always_finite(
    start: float, cap: float, doublings: int
) -> None:
    delay = capped_exponential(start, cap, doublings)
    assert math.isfinite(delay) and 0.0 <= delay <= cap
    if doublings <= 60:  # small enough to compute the power directly
        assert math.isclose(delay, min(start * 2.0 ** max(0, doublings), cap))
    assert capped_exponential(start, cap, doublings + 1) >= delay  # never shrinks


def test_nothing_to_wait_for_a_zero_start_or_cap() -> None:
    assert capped_exponential(0.0, 60.0, 3) == 0.0
    assert capped_exponential(1.0, 0.0, 3) == 0.0

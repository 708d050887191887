"""The provider quota the rate-limiting stub enforces, on its own: time passed in, exact."""

from __future__ import annotations

import pytest

from retinue import InvalidArgument
from retinue.testing import ProviderQuota


def test_requests_per_minute_count_at_arrival_and_a_refusal_says_when() -> None:
    quota = ProviderQuota(requests_per_minute=2)
    assert quota.admit(10, 0.0) is None and quota.admit(10, 1.0) is None
    refusal = quota.admit(10, 2.5)
    assert refusal is not None
    assert (refusal.kind, refusal.retry_after_s) == ("requests", 58)  # 60 - 2.5, rounded up
    assert refusal.message == (
        "Rate limit reached on requests per min (RPM): Limit 2, Used 2, Requested 1. "
        "Please try again in 58s."
    )
    assert quota.admit(10, 59.9) is not None  # a refused request is not counted...
    assert quota.admit(10, 60.0) is None  # ...and the first one left the window at 60 s


def test_tokens_per_minute_count_prompt_and_completion() -> None:
    quota = ProviderQuota(tokens_per_minute=100)
    assert quota.admit(60, 0.0) is None
    refusal = quota.admit(50, 10.0)
    assert refusal is not None and (refusal.kind, refusal.retry_after_s) == ("tokens", 50)
    assert "tokens per min (TPM): Limit 100, Used 60, Requested 50" in refusal.message
    assert quota.admit(40, 10.0) is None
    assert quota.remaining(10.0) == (None, 0)
    too_big = quota.admit(101, 100.0)
    assert too_big is not None and too_big.retry_after_s == 60  # never fits: a window


def test_concurrent_requests_are_bounded_until_one_is_done() -> None:
    quota = ProviderQuota(max_in_flight=1)
    assert quota.admit(1, 0.0) is None
    refusal = quota.admit(1, 0.0)
    assert refusal is not None and (refusal.kind, refusal.retry_after_s) == ("concurrency", 1)
    quota.done()
    assert quota.admit(1, 0.0) is None


def test_the_report_counts_per_window_and_at_most_in_any_window() -> None:
    quota = ProviderQuota(requests_per_minute=3, tokens_per_minute=1000, start=100.0)
    for at in (100.0, 130.0, 150.0, 155.0, 170.0, 215.0):
        quota.admit(100, at)
    report = quota.report()
    assert (report.admitted, report.tokens, report.rate_limited) == (5, 500, 1)  # 155 refused
    assert report.refused == {"requests": 1}
    assert [(w.start, w.requests, w.tokens, w.rate_limited) for w in report.windows] == [
        (0.0, 3, 300, 1),
        (60.0, 2, 200, 0),
    ]
    assert (report.max_requests_in_window, report.max_tokens_in_window) == (3, 300)
    assert report.max_in_flight == 5  # nothing was marked done


@pytest.mark.parametrize(
    "bad",
    [
        {"requests_per_minute": 0},
        {"tokens_per_minute": -1},
        {"max_in_flight": True},
        {"window_s": 0.0},
        {"window_s": float("nan")},
    ],
)
def test_bad_limits_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        ProviderQuota(**bad)  # type: ignore[arg-type]

"""The rate limits a provider states in its headers, and how an adaptive limit follows them.

Pure logic with time passed in (a deterministic clock): reading OpenAI's and
Anthropic's headers (as litellm hands them on), a stated limit that bounds
the window and paces the calls, a stated remainder that shows another
client's calls, a 429 the headers show was not a rate's (too many at once:
only the level drops), a rate 429 with the rate stated (the level stays),
and a limit told not to read them.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from retinue import InvalidLimits, ProviderLimit, Usage
from retinue.protocol.provider_limits import (
    AdmissionController,
    Admitted,
    LimitSnapshot,
    ModelCall,
    StatedLimits,
    parse_duration,
    stated_limits,
)

WINDOW_S = 10.0
USAGE = Usage(prompt_tokens=80, completion_tokens=20)


# -- reading the headers --------------------------------------------------------------------


def test_openai_headers_as_litellm_hands_them_on_are_read() -> None:
    headers = {
        "x-ratelimit-limit-requests": "500",  # litellm copies OpenAI's bare
        "llm_provider-x-ratelimit-limit-requests": "500",
        "llm_provider-x-ratelimit-remaining-requests": "499",
        "llm_provider-x-ratelimit-reset-requests": "120ms",
        "llm_provider-X-RateLimit-Limit-Tokens": "200000",
        "llm_provider-x-ratelimit-remaining-tokens": "199000",
        "llm_provider-x-ratelimit-reset-tokens": "6m0s",
        "llm_provider-content-type": "application/json",
    }
    assert stated_limits(headers) == StatedLimits(
        requests_limit=500,
        requests_remaining=499,
        requests_reset_s=0.12,
        tokens_limit=200000,
        tokens_remaining=199000,
        tokens_reset_s=360.0,
    )


def test_anthropic_headers_and_their_absolute_reset_are_read() -> None:
    wall = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-01-01T12:00:30Z",
        "anthropic-ratelimit-tokens-limit": "40000",
    }
    stated = stated_limits(headers, wall)
    assert stated == StatedLimits(
        requests_limit=50, requests_remaining=0, requests_reset_s=30.0, tokens_limit=40000
    )
    assert stated.has_room(10) is False


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"content-type": "application/json"},
        {"x-ratelimit-limit-tokens": "-1"},
        {"x-ratelimit-limit-requests": "0"},
    ],
)
def test_headers_that_state_nothing_usable_give_none(headers: dict[str, str] | None) -> None:
    # Azure sends -1 when it has nothing to say; a limit of 0 would hold every call back
    assert stated_limits(headers) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("6m0s", 360.0), ("1h2m3.5s", 3723.5), ("20ms", 0.02), ("2.5", 2.5)],
)
def test_reset_durations_parse_as_openai_writes_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1x", "s1", "-3", "1s later"])
def test_a_reset_that_is_no_duration_parses_as_none(text: str) -> None:
    assert parse_duration(text) is None


def test_room_says_whether_the_rate_ran_out() -> None:
    assert StatedLimits(requests_remaining=3, tokens_remaining=500).has_room(400) is True
    assert StatedLimits(requests_remaining=3, tokens_remaining=300).has_room(400) is False
    assert StatedLimits(requests_remaining=0).has_room(1) is False
    assert StatedLimits(requests_limit=3).has_room(1) is None  # no remainder: it does not say


# -- an adaptive limit follows them ---------------------------------------------------------


class Driver:
    """One limit's controller, calls made and ended by hand, the clock moved by hand."""

    def __init__(self, limit: ProviderLimit | None = None) -> None:
        self.limit = limit or ProviderLimit("openai")
        self.c = AdmissionController([self.limit], random.Random(0), WINDOW_S)
        self.n = 0

    def ask(self, now: float, tokens: int = 100) -> ModelCall | None:
        """A new call at ``now``: the call if admitted, else None (it waits)."""
        self.n += 1
        call = ModelCall(f"c{self.n}", f"t{self.n % 3}", "openai/m", tokens=tokens)
        return call if isinstance(self.c.try_admit(call, now), Admitted) else None

    def shown(self, now: float) -> LimitSnapshot:
        return self.c.snapshot(now)[0]


def test_a_stated_requests_limit_bounds_the_window_and_paces_the_calls() -> None:
    d = Driver()
    first = d.ask(0.0)
    assert first is not None
    stated = StatedLimits(requests_limit=4, requests_remaining=3, tokens_limit=10_000)
    d.c.release(first, USAGE, 0.1, 200, stated=stated)
    shown = d.shown(0.1)
    assert (shown.stated_requests, shown.stated_tokens) == (4, 10_000)
    assert shown.learned_requests == 4  # the calls go at the stated pace
    admitted = [call for call in (d.ask(0.2 + i * 3.0) for i in range(6)) if call is not None]
    # 4 per window: the first call and 3 more, until the first leaves the window at 10.1
    assert len(admitted) == 3, [c.id for c in admitted]
    assert len(d.c.admit_waiting(10.3)) == 1  # one of the three waiting goes


def test_without_a_statement_an_adaptive_limit_admits_unbounded() -> None:
    d = Driver()
    first = d.ask(0.0)
    assert first is not None
    d.c.release(first, USAGE, 0.1, 200)
    assert all(d.ask(0.2 + i * 0.1) is not None for i in range(20))
    assert d.shown(3.0).stated_requests is None


def test_a_stated_remainder_counts_another_clients_calls() -> None:
    d = Driver()
    first = d.ask(0.0)
    assert first is not None
    # the provider counted 8 of 10: this client made 1, another client 7
    stated = StatedLimits(requests_limit=10, requests_remaining=2)
    d.c.release(first, USAGE, 0.1, 200, stated=stated)
    admitted = [call for call in (d.ask(0.2 + i * 2.0) for i in range(4)) if call is not None]
    assert len(admitted) == 2


def test_a_429_that_shows_requests_and_tokens_left_lowers_only_the_level() -> None:
    d = Driver()
    calls = [d.ask(0.0) for _ in range(10)]
    assert all(calls)
    for i, call in enumerate(calls[:8]):
        assert call is not None
        d.c.release(call, USAGE, 0.1 + i * 0.01, 200)
    room = StatedLimits(requests_remaining=40, tokens_remaining=5000)
    assert calls[8] is not None
    backoff = d.c.release(calls[8], None, 0.5, 429, 1.0, stated=room)
    assert backoff is not None and backoff.reason == "concurrency"
    assert backoff.lowered and backoff.level == 1.0  # half of the two in flight
    # without the headers this 429 would teach a rate: 8 calls went through in the window
    assert d.shown(0.5).learned_requests is None


def test_the_same_429_without_headers_teaches_a_rate() -> None:
    d = Driver()
    calls = [d.ask(0.0) for _ in range(10)]
    for i, call in enumerate(calls[:8]):
        assert call is not None
        d.c.release(call, USAGE, 0.1 + i * 0.01, 200)
    assert calls[8] is not None
    backoff = d.c.release(calls[8], None, 0.5, 429, 1.0)
    assert backoff is not None and backoff.reason is None
    assert d.shown(0.5).learned_requests == 8  # 0.9 x the window's 9 (the 429 taken out)


def test_a_rate_429_with_the_rate_stated_keeps_the_level() -> None:
    d = Driver()
    calls = [d.ask(0.0) for _ in range(6)]
    assert all(calls)
    stated = StatedLimits(requests_limit=5, requests_remaining=0, tokens_limit=10_000)
    assert calls[0] is not None and calls[5] is not None
    d.c.release(calls[0], USAGE, 0.1, 200, stated=stated)
    backoff = d.c.release(calls[5], None, 0.2, 429, 2.0, stated=stated)
    assert backoff is not None and backoff.reason == "rate"
    assert not backoff.lowered and backoff.level is None  # the stated window answers it
    assert backoff.until == pytest.approx(2.2)
    shown = d.shown(0.2)
    assert shown.learned_requests == 5  # the stated limit, not one learned below it
    # the refused call is not counted: 5 held (4 in flight, 1 ended), none fits until one leaves
    assert shown.requests == 0 and d.ask(2.3) is None


def test_a_limit_that_does_not_read_headers_ignores_them() -> None:
    d = Driver(ProviderLimit("openai", provider_headers=False))
    first = d.ask(0.0)
    assert first is not None
    d.c.release(first, USAGE, 0.1, 200, stated=StatedLimits(requests_limit=2))
    assert d.shown(0.1).stated_requests is None
    assert all(d.ask(0.2 + i * 0.1) is not None for i in range(5))


def test_a_static_limit_ignores_them_too() -> None:
    d = Driver(ProviderLimit("openai", max_in_flight=8, adaptive=False))
    first = d.ask(0.0)
    assert first is not None
    d.c.release(first, USAGE, 0.1, 200, stated=StatedLimits(requests_limit=2))
    assert d.shown(0.1).stated_requests is None


def test_provider_headers_must_be_a_bool() -> None:
    with pytest.raises(InvalidLimits, match="provider_headers"):
        ProviderLimit("openai", provider_headers="yes")  # type: ignore[arg-type]


def test_a_call_larger_than_the_stated_tokens_goes_alone_rather_than_never() -> None:
    d = Driver()
    first = d.ask(0.0)
    assert first is not None
    stated = StatedLimits(tokens_limit=500, tokens_remaining=400)
    d.c.release(first, USAGE, 0.1, 200, stated=stated)
    big = d.ask(0.2, tokens=800)
    assert big is None  # the window holds the first call's 100 tokens (the provider's count)
    assert d.c.next_check(0.2) == pytest.approx(10.1)  # when they leave it
    (went,) = d.c.admit_waiting(10.1)
    assert went.tokens == 800

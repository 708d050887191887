"""The rate-limiting stub through litellm's real OpenAI path, and retinue's retries on its 429s.

A 429 from :class:`~retinue.testing.RateLimitedStub` reaches retinue as a
provider's rate limit: classified retryable with the stub's ``Retry-After``,
waited out by the model call's retries, or failing the turn with the
provider's words once the retries are spent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from retinue import AgentState, Profile
from retinue.llm.model._retry import classify
from retinue.protocol.provider_limits import stated_limits
from retinue.testing import RateLimitedStub, StubReply, StubRequest
from retinue.testing.rate_stub import duration

from .conftest import SETTLE_S, run, stub_runner

CHAT = [{"role": "user", "content": "hello"}]


@pytest.fixture
def limited(litellm: ModuleType) -> Iterator[RateLimitedStub]:
    """A stub that admits one request a minute."""
    with RateLimitedStub(requests_per_minute=1) as server:
        yield server


def call(litellm: ModuleType, stub: RateLimitedStub) -> Any:
    """One chat completion through litellm's OpenAI provider (its client, its errors), with
    the OpenAI client's own retries off, as retinue's runner calls it."""
    return asyncio.run(
        litellm.acompletion(
            model="openai/stub-model",
            messages=CHAT,
            api_base=stub.url,
            api_key="x",
            max_retries=0,
        )
    )


def test_a_429_reaches_litellm_as_a_rate_limit_with_its_retry_after(
    litellm: ModuleType, limited: RateLimitedStub
) -> None:
    answer = call(litellm, limited)
    assert answer.choices[0].message.content
    with pytest.raises(litellm.RateLimitError) as caught:
        call(litellm, limited)
    failure = classify(caught.value, "openai/stub-model", 30.0)
    assert (failure.status, failure.retryable, failure.provider) == (429, True, "openai")
    assert failure.retry_after is not None and 58.0 <= failure.retry_after <= 60.0
    assert "Rate limit reached on requests per min (RPM): Limit 1, Used 1" in failure.message
    stated = stated_limits(failure.headers)  # a 429's headers state the limit, none left
    assert stated is not None and (stated.requests_limit, stated.requests_remaining) == (1, 0)
    assert stated.has_room(1) is False
    report = limited.report()
    assert (report.admitted, report.rate_limited, report.refused) == (1, 1, {"requests": 1})
    body = limited.requests[1].body
    assert body["model"] == "stub-model"


def test_a_turn_whose_retries_are_spent_fails_with_the_providers_words(
    llm_runtime: Any, limited: RateLimitedStub
) -> None:
    rt = llm_runtime([Profile("leaf", runner=stub_runner(limited, retries=0))])
    assert run(rt, "leaf", "first", name="first").state is AgentState.COMPLETED
    info = run(rt, "leaf", "second", name="second")
    assert info.state is AgentState.FAILED
    assert info.error is not None
    assert info.error.startswith(
        "ModelCallFailed: openai status 429: Rate limit reached on requests per min (RPM): "
        "Limit 1, Used 1, Requested 1. Please try again in "
    )
    assert info.error.endswith("s. (1 attempt)")
    assert limited.rate_limited == 1


def test_retries_wait_out_the_retry_after_and_the_call_goes_through(
    llm_runtime: Any, litellm: ModuleType
) -> None:
    """A one-second "minute": the second call's 429 says 1 s; the retry after it is admitted."""
    with RateLimitedStub(requests_per_minute=1, window_s=1.0) as stub:
        rt = llm_runtime([Profile("leaf", runner=stub_runner(stub, retries=3, retry_base_s=0.001))])
        first = rt.spawn("leaf", "one", name="one")
        second = rt.spawn("leaf", "two", name="two")
        for info in (first, second):
            done = rt.wait(info.id, timeout=SETTLE_S)
            assert done.status == "completed", done
        report = stub.report()
        assert report.admitted == 2 and report.rate_limited >= 1
        assert report.max_requests_in_window == 1  # the stub never let two into one window
        refused = {r.number for r in stub.limited}
        assert len(refused) == report.rate_limited
        admitted = [r for r in stub.requests if r.number not in refused]
        # Retry-After is a lower bound on the wait: 1 s from the first refusal.
        assert admitted[-1].at - stub.limited[0].at >= 1.0


def test_tokens_count_the_prompt_and_the_answer(litellm: ModuleType) -> None:
    with RateLimitedStub(lambda r: StubReply(usage=(50, 10)), tokens_per_minute=100) as stub:
        first = call(litellm, stub)
        assert first.usage.total_tokens == 60
        with pytest.raises(litellm.RateLimitError) as caught:
            call(litellm, stub)
        assert "tokens per min (TPM): Limit 100, Used 60, Requested 60" in str(caught.value)
        assert stub.report().refused == {"tokens": 1}


def test_concurrent_requests_past_the_limit_are_refused(litellm: ModuleType) -> None:
    def hold_the_first(request: StubRequest) -> StubReply | None:
        return StubReply(delay_s=30.0) if request.number == 1 else None

    with RateLimitedStub(hold_the_first, max_in_flight=1, requests_per_minute=10) as stub:
        first = threading.Thread(target=_call_quietly, args=(litellm, stub), daemon=True)
        first.start()
        deadline = time.monotonic() + SETTLE_S  # a hang guard, never a timing assertion
        while stub.quota.in_flight < 1:
            assert time.monotonic() < deadline, "the first request never arrived"
            time.sleep(0.01)
        with pytest.raises(litellm.RateLimitError) as caught:
            call(litellm, stub)
        assert "Too many concurrent requests: limit 1" in str(caught.value)
        failure = classify(caught.value, "openai/stub-model", 30.0)
        assert failure.retry_after == 1.0
        assert stub.report().refused == {"concurrency": 1}
        stated = stated_limits(failure.headers)  # requests left: it was not the rate
        assert stated is not None and stated.requests_remaining == 9
        assert stated.has_room(1) is True


def _call_quietly(litellm: ModuleType, stub: RateLimitedStub) -> None:
    """Call the stub, ignoring how it ends (the stub stops under it)."""
    with contextlib.suppress(Exception):
        asyncio.run(
            asyncio.wait_for(
                litellm.acompletion(
                    model="openai/stub-model",
                    messages=CHAT,
                    api_base=stub.url,
                    api_key="x",
                    max_retries=0,
                ),
                SETTLE_S,
            )
        )


def test_every_answer_carries_the_remaining_quota(litellm: ModuleType) -> None:
    with RateLimitedStub(requests_per_minute=5, tokens_per_minute=10_000) as stub:
        answer = call(litellm, stub)
        headers = answer._hidden_params["additional_headers"]
        found = {k.removeprefix("llm_provider-"): v for k, v in headers.items()}
        assert found["x-ratelimit-limit-requests"] == "5"
        assert found["x-ratelimit-remaining-requests"] == "4"
        assert found["x-ratelimit-limit-tokens"] == "10000"
        assert found["x-ratelimit-reset-requests"] == found["x-ratelimit-reset-tokens"]
        assert json.loads(json.dumps(found))  # plain strings
        stated = stated_limits(headers)
        assert stated is not None
        assert (stated.requests_limit, stated.requests_remaining) == (5, 4)
        assert stated.requests_reset_s is not None and 59.0 <= stated.requests_reset_s <= 60.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0ms"), (0.0204, "20ms"), (1.5, "1.5s"), (59.25, "59.25s"), (360.0, "6m0s")],
)
def test_reset_times_are_written_as_openai_writes_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text

"""The admission controller, example by example: in flight, windows, Retry-After, AIMD, order.

Pure logic with time passed in: every figure here is exact, nothing sleeps.
The properties over random workloads are in ``test_admission_properties.py``.
"""

from __future__ import annotations

import random

import pytest

from retinue import InvalidArgument, InvalidLimits, ProviderLimit, ProviderLimitExceeded, Usage
from retinue.protocol.provider_limits import AdmissionController, Admitted, ModelCall, Waiting


def controller(*limits: ProviderLimit, seed: int = 0) -> AdmissionController:
    return AdmissionController(limits, random.Random(seed))


def call(n: int | str, tree: str = "t", model: str = "openai/m", tokens: int = 10) -> ModelCall:
    return ModelCall(str(n), tree, model, tokens=tokens)


def usage(tokens: int) -> Usage:
    return Usage(prompt_tokens=tokens, completion_tokens=0)


def admitted(c: AdmissionController, *calls: ModelCall, now: float = 0.0) -> list[str]:
    """Ask for each call; return the ids admitted at once."""
    return [x.id for x in calls if isinstance(c.try_admit(x, now), Admitted)]


def test_a_call_no_limit_covers_is_admitted_at_once_and_counted_nowhere() -> None:
    c = controller(ProviderLimit("anthropic", max_in_flight=1))
    assert admitted(c, *(call(n, model="openai/m") for n in range(5))) == ["0", "1", "2", "3", "4"]
    assert c.snapshot(0.0)[0].admitted == 0
    c.release("3", None, 1.0, 200)


def test_in_flight_is_bounded_and_a_release_lets_the_next_go() -> None:
    c = controller(ProviderLimit("openai", max_in_flight=2))
    calls = [call(n) for n in range(4)]
    assert admitted(c, *calls) == ["0", "1"]
    waiting = c.try_admit(calls[2], 0.0)
    assert waiting == Waiting(calls[2], None)  # nothing but a release lets it go
    assert c.admit_waiting(0.5) == []
    c.release("0", usage(10), 1.0, 200)
    assert c.admit_waiting(1.0) == [calls[2]]
    assert isinstance(c.try_admit(calls[2], 1.0), Admitted)  # asking again is harmless
    snap = c.snapshot(1.0)[0]
    assert (snap.in_flight, snap.waiting, snap.admitted) == (2, 1, 3)


def test_requests_per_minute_count_from_admission_to_a_minute_after_the_end() -> None:
    c = controller(ProviderLimit("openai", requests_per_minute=2))
    calls = [call(n) for n in range(3)]
    assert admitted(c, *calls) == ["0", "1"]
    c.release("0", usage(10), 5.0, 200)
    c.release("1", usage(10), 7.0, 200)
    assert c.next_check(7.0) == 65.0  # the first request leaves the window 60 s after its end
    assert c.admit_waiting(64.9) == []
    assert c.admit_waiting(65.0) == [calls[2]]


def test_tokens_per_minute_take_the_estimate_and_a_response_corrects_it() -> None:
    c = controller(ProviderLimit("openai", tokens_per_minute=1000))
    big, second = call(1, tokens=600), call(2, tokens=600)
    assert admitted(c, big, second) == ["1"]
    assert c.snapshot(0.0)[0].tokens == 600
    c.release(big, usage(150), 2.0, 200)  # it really spent 150
    assert c.admit_waiting(2.0) == [second]
    assert c.snapshot(2.0)[0].tokens == 750
    assert c.snapshot(62.0)[0].tokens == 600  # the 150 left the window a minute after the end


def test_a_call_larger_than_tokens_per_minute_is_refused_not_queued() -> None:
    c = controller(ProviderLimit("openai/m", tokens_per_minute=1000))
    with pytest.raises(ProviderLimitExceeded) as caught:
        c.try_admit(call(1, tokens=1001), 0.0)
    error = caught.value
    assert (error.match, error.limit, error.value) == ("openai/m", 1000, 1001)
    assert "raise tokens_per_minute" in str(error)
    assert c.waiting == 0 and c.snapshot(0.0)[0].waiting == 0


def test_a_retry_after_closes_the_whole_limit_then_lets_calls_go_spread_out() -> None:
    limit = ProviderLimit("openai", max_in_flight=8, jitter=0.5, adaptive=False)
    c = controller(limit, seed=3)
    first = call("first", tree="a")
    assert admitted(c, first) == ["first"]
    backoff = c.release(first, None, 10.0, 429, retry_after=4.0)
    assert backoff is not None and backoff.until == 14.0 and backoff.match == "openai"
    others = [call(n, tree=f"t{n % 3}") for n in range(6)]
    assert admitted(c, *others, now=10.0) == []  # other trees, same limit: all wait
    at = c.next_check(10.0)
    assert at is not None and at >= 14.0
    released: list[float] = []
    now = 10.0
    while len(released) < len(others):
        step = c.next_check(now)
        assert step is not None
        now = step
        released += [now] * len(c.admit_waiting(now))
    assert min(released) >= 14.0
    # Spread over about jitter x Retry-After (2 s), not all at the same instant.
    assert len(set(released)) == len(released)
    assert max(released) - min(released) < 4.0
    snap = c.snapshot(12.0)[0]
    assert snap.rate_limited == 1


def test_a_429_is_charged_to_the_calls_most_specific_limit_only() -> None:
    provider = ProviderLimit("openai", max_in_flight=100)
    mini = ProviderLimit("openai/mini", max_in_flight=8)
    c = controller(provider, mini)
    limited = call("x", model="openai/mini")
    assert admitted(c, limited) == ["x"]
    backoff = c.release(limited, None, 1.0, 429, retry_after=30.0)
    assert backoff is not None and backoff.match == "openai/mini"
    assert admitted(c, call("big", model="openai/big"), now=2.0) == ["big"]
    assert admitted(c, call("mini2", model="openai/mini"), now=2.0) == []
    by_match = {s.match: s for s in c.snapshot(2.0)}
    assert by_match["openai/mini"].closed_until == 31.0
    assert by_match["openai"].closed_until is None
    # Halved from what flew (one call), not from 8: the floor.
    assert (by_match["openai/mini"].level, by_match["openai"].level) == (1.0, 100.0)


def test_aimd_halves_once_per_burst_and_climbs_back_by_one_per_level_of_successes() -> None:
    c = controller(ProviderLimit("openai", max_in_flight=8, min_in_flight=2))
    burst = [call(n) for n in range(8)]
    assert len(admitted(c, *burst)) == 8
    for n in range(8):  # one burst: eight 429s of calls admitted before the first decrease
        c.release(burst[n], None, 1.0, 429)
    level = c.snapshot(1.0)[0].level
    assert level == 4.0
    # A call admitted after the decrease gets a 429: a new decrease.
    assert admitted(c, call("late"), now=2.0) == ["late"]
    c.release("late", None, 2.0, 429)
    assert c.snapshot(2.0)[0].level == 2.0
    assert admitted(c, call("again"), now=3.0) == ["again"]
    c.release("again", None, 3.0, 429)
    assert c.snapshot(3.0)[0].level == 2.0  # never below min_in_flight
    # Successes while the level is in use raise it: increase / level each.
    pending = [call(f"s{n}") for n in range(40)]
    for x in pending:
        c.try_admit(x, 4.0)
    levels: list[float] = []
    for x in pending[:30]:
        c.release(x, usage(1), 5.0, 200)
        c.admit_waiting(5.0)
        level = c.snapshot(5.0)[0].level
        assert level is not None
        levels.append(level)
    assert levels == sorted(levels) and levels[0] == 2.5 and levels[-1] <= 8.0
    assert levels[-1] > 7.0  # about one per level's worth: 2 + 30 successes ~ 7.7


def test_a_level_without_max_in_flight_starts_unbounded_and_halves_what_flew() -> None:
    c = controller(ProviderLimit("openai"))
    calls = [call(n) for n in range(10)]
    assert len(admitted(c, *calls)) == 10
    assert c.snapshot(0.0)[0].level is None
    c.release(calls[0], None, 1.0, 429)
    assert c.snapshot(1.0)[0].level == 5.0


def test_a_limit_that_is_not_adaptive_keeps_its_level_but_honours_retry_after() -> None:
    c = controller(ProviderLimit("openai", max_in_flight=4, adaptive=False, jitter=0.0))
    assert admitted(c, call(1)) == ["1"]
    backoff = c.release("1", None, 1.0, 429, retry_after=100.0)
    assert backoff is not None and not backoff.lowered and backoff.level == 4.0
    assert backoff.until == 61.0  # capped at max_retry_after_s
    assert admitted(c, call(2), now=60.9) == []
    assert c.admit_waiting(61.0) == [call(2)]


def test_on_rate_limited_backs_a_limit_off_by_its_match() -> None:
    c = controller(ProviderLimit("http://127.0.0.1:9/v1/", max_in_flight=6))
    backoff = c.on_rate_limited("HTTP://127.0.0.1:9/v1", 2.0, 0.0)
    assert (backoff.level_before, backoff.level, backoff.until) == (6.0, 3.0, 2.0)
    with pytest.raises(InvalidLimits, match="no provider limit 'openai' is in force"):
        c.on_rate_limited("openai", 1.0, 0.0)


def test_a_waiting_call_is_cancelled_and_never_admitted() -> None:
    c = controller(ProviderLimit("openai", max_in_flight=1))
    assert admitted(c, call(1), call(2), call(3)) == ["1"]
    assert c.cancel("2") is True
    assert c.cancel("2") is False and c.cancel("1") is False  # not waiting (any more)
    c.release("1", None, 1.0, 200)
    assert c.admit_waiting(1.0) == [call(3)]
    assert c.snapshot(1.0)[0].waiting == 0


def test_mistakes_are_typed_errors() -> None:
    c = controller(ProviderLimit("openai", max_in_flight=1))
    c.try_admit(call(1), 0.0)
    with pytest.raises(InvalidArgument, match="a different model call with id '1'"):
        c.try_admit(call(1, tokens=99), 0.0)
    c.release("1", None, 1.0, 200)
    with pytest.raises(InvalidArgument, match="no model call '1' is in flight"):
        c.release("1", None, 1.0, 200)
    for bad in ({"tokens": -1}, {"weight": 0}, {"weight": float("inf")}, {"tree": ""}):
        with pytest.raises(InvalidArgument):
            ModelCall(**{"id": "x", "tree": "t", "model": "m", **bad})  # type: ignore[arg-type]
    with pytest.raises(InvalidLimits, match="names 'openai' twice"):
        controller(ProviderLimit("openai"), ProviderLimit("openai", max_in_flight=2))


def test_a_call_that_does_not_fit_is_not_overtaken_on_its_limit_but_is_elsewhere() -> None:
    """A big call waiting on tokens holds its limit: smaller later calls there wait behind it;
    a call that needs only another limit goes ahead."""
    tokens = ProviderLimit("openai/a", tokens_per_minute=1000)
    other = ProviderLimit("openai/b", max_in_flight=4)
    c = controller(tokens, other)
    assert admitted(c, call("first", tree="x", model="openai/a", tokens=700)) == ["first"]
    big = call("big", tree="y", model="openai/a", tokens=600)
    small = call("small", tree="z", model="openai/a", tokens=100)
    elsewhere = call("b", tree="z", model="openai/b")
    assert admitted(c, big, small, elsewhere) == ["b"]
    c.release("first", usage(700), 1.0, 200)
    assert c.admit_waiting(1.0) == []  # still 700 in the window: big does not fit, small waits
    assert c.next_check(1.0) == 61.0
    assert c.admit_waiting(61.0) == [big, small]


def test_two_trees_always_waiting_take_turns() -> None:
    c = controller(ProviderLimit("openai", max_in_flight=1))
    for n in range(10):
        c.try_admit(call(f"a{n}", tree="a"), 0.0)
        c.try_admit(call(f"b{n}", tree="b"), 0.0)
    order = ["a0"]
    flying = "a0"
    for step in range(1, 19):
        c.release(flying, None, float(step), 200)
        (nxt,) = c.admit_waiting(float(step))
        order.append(nxt.id)
        flying = nxt.id
    assert [x[0] for x in order] == ["a", "b"] * 9 + ["a"]
    assert [x for x in order if x[0] == "a"] == [f"a{n}" for n in range(10)]  # in order per tree


def test_a_small_tree_is_served_as_soon_as_it_asks_however_many_calls_a_big_one_queues() -> None:
    c = controller(ProviderLimit("openai", max_in_flight=4))
    for n in range(64):
        c.try_admit(call(f"big{n}", tree="big"), 0.0)
    flying = [f"big{n}" for n in range(4)]
    small_waits = []
    for step in range(1, 40):
        now = float(step)
        if step % 5 == 0:  # the small tree's two agents ask now and then
            c.try_admit(call(f"small{step}", tree="small"), now)
        done = flying.pop(0)
        c.release(done, None, now, 200)
        for x in c.admit_waiting(now):
            flying.append(x.id)
            if x.tree == "small":
                small_waits.append(now - float(step - step % 5))  # steps it waited
    assert small_waits and max(small_waits) == 0.0  # admitted at the first free slot


def test_priority_weights_the_turns() -> None:
    c = controller(ProviderLimit("openai", max_in_flight=1))
    for n in range(60):
        c.try_admit(ModelCall(f"a{n}", "a", "openai/m", weight=2.0), 0.0)
        c.try_admit(ModelCall(f"b{n}", "b", "openai/m", weight=1.0), 0.0)
    served = {"a": 0, "b": 0}
    flying = "a0"
    served["a"] += 1
    for step in range(1, 60):
        c.release(flying, None, float(step), 200)
        (nxt,) = c.admit_waiting(float(step))
        served[nxt.tree] += 1
        flying = nxt.id
    assert served == {"a": 40, "b": 20}

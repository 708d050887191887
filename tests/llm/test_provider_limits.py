"""Provider limits through the runtime: model calls admitted by its gate, against a real stub.

Every test opens a real runtime whose model agents call litellm's OpenAI
provider against :class:`~retinue.testing.RateLimitedStub` on 127.0.0.1 (or
the scripted model): which calls a limit covers, estimates corrected by
usage, the adaptive level, a ``Retry-After`` that closes the whole limit,
fairness between trees and by priority, an interrupt while a call waits,
budgets before provider limits, and what ``rt.diagnostics`` shows. Waits are
for states (a handler blocked until the test lets it go), never for time.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
from support import wait_settled

from retinue import (
    AgentState,
    ArgumentTypeError,
    InvalidLimits,
    Limits,
    Profile,
    ProviderBackoff,
    ProviderLimit,
    Runtime,
)
from retinue.llm import LiteLLMRunner
from retinue.protocol.provider_limits import LimitSnapshot
from retinue.testing import RateLimitedStub, StubReply, StubRequest

from .conftest import SETTLE_S, stub_runner

OpenRuntime = Callable[..., Runtime]


@pytest.fixture
def open_rt(tmp_path: Path, litellm: ModuleType) -> Iterator[OpenRuntime]:
    """Return ``open(profiles, provider_limits, **limits) -> Runtime``; each is shut at the end."""
    opened: list[Runtime] = []

    def _open(
        profiles: list[Profile], provider_limits: list[ProviderLimit], **limits: Any
    ) -> Runtime:
        limits.setdefault("wait_default_s", 30.0)
        rt = Runtime.open(
            tmp_path / f"store{len(opened)}",
            profiles=profiles,
            limits=Limits(**limits),
            provider_limits=provider_limits,
        )
        opened.append(rt)
        return rt

    yield _open
    for rt in reversed(opened):
        rt.shutdown()


def until(check: Callable[[], bool], what: str, timeout: float = SETTLE_S) -> None:
    """Wait until ``check()`` holds (a hang guard, not a timing assertion)."""
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if check():
            return
        done.wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def limit_of(rt: Runtime, match: str) -> LimitSnapshot:
    """The diagnostics' figures of the limit ``match``."""
    found = [s for s in rt.diagnostics.provider_limits if s.match == match]
    assert found, f"no provider limit {match!r} in {rt.diagnostics.provider_limits}"
    return found[0]


def task_of(request: StubRequest) -> str:
    """The task text a request carries (its first user message)."""
    return next(str(m["content"]) for m in request.messages if m.get("role") == "user")


class Holder:
    """A stub handler that holds the first request until :meth:`free` (others answer at once)."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.go = threading.Event()

    def __call__(self, request: StubRequest) -> StubReply | None:
        if request.number == 1:
            self.held.set()
            self.go.wait(SETTLE_S)
        return None

    def free(self) -> None:
        self.go.set()


# -- what a limit covers --------------------------------------------------------------------


def test_a_limit_counts_only_the_calls_it_covers(open_rt: OpenRuntime) -> None:
    with RateLimitedStub() as stub:
        other = LiteLLMRunner("openai/other-model", api_base=stub.url, api_key="x")
        rt = open_rt(
            [Profile("mini", runner=stub_runner(stub)), Profile("other", runner=other)],
            [
                ProviderLimit("openai", max_in_flight=8),
                ProviderLimit("openai/stub-model", requests_per_minute=100),
                ProviderLimit("anthropic", max_in_flight=1),
            ],
        )
        for profile, name in (("mini", "a"), ("other", "b"), ("other", "c")):
            info = rt.spawn(profile, "hello", name=name)
            assert wait_settled(rt, info.id, timeout=SETTLE_S).state is AgentState.COMPLETED
        assert limit_of(rt, "openai").admitted == 3  # every openai/ model
        model = limit_of(rt, "openai/stub-model")
        assert (model.admitted, model.requests) == (1, 1)  # that model only
        assert limit_of(rt, "anthropic").admitted == 0
        assert rt.diagnostics.admission_waiting == ()


def test_open_merges_its_limits_over_the_environment(
    open_rt: OpenRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "RETINUE_PROVIDER_LIMITS",
        '{"openai": {"max_in_flight": 2}, "retinue": {"requests_per_minute": 7}}',
    )
    rt = open_rt(
        [Profile("p", runner=lambda turn: "ok")], [ProviderLimit("openai", max_in_flight=5)]
    )
    shown = {s.match: s for s in rt.diagnostics.provider_limits}
    assert shown["openai"].max_in_flight == 5  # open's replaces the environment's whole
    assert shown["retinue"].requests_per_minute == 7


def test_bad_provider_limits_are_refused_at_open(tmp_path: Path) -> None:
    with pytest.raises(ArgumentTypeError, match=r"list of retinue\.ProviderLimit"):
        Runtime.open(tmp_path / "a", provider_limits=ProviderLimit("openai"))  # type: ignore[arg-type]
    with pytest.raises(InvalidLimits, match=r"provider_limits names 'openai' twice"):
        Runtime.open(
            tmp_path / "b",
            provider_limits=[ProviderLimit("openai"), ProviderLimit("openai", max_in_flight=2)],
        )
    with pytest.raises(InvalidLimits, match="ProviderLimit values"):
        Runtime.open(tmp_path / "c", provider_limits=[{"match": "openai"}])  # type: ignore[list-item]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# -- tokens ---------------------------------------------------------------------------------


def test_the_usage_a_response_reports_replaces_the_estimate(open_rt: OpenRuntime) -> None:
    def answer(request: StubRequest) -> StubReply:
        return StubReply(message={"role": "assistant", "content": "done"}, usage=(30, 12))

    with RateLimitedStub(answer) as stub:
        rt = open_rt(
            [Profile("leaf", runner=stub_runner(stub))],
            [ProviderLimit(stub.url, tokens_per_minute=100_000)],
        )
        info = rt.spawn("leaf", "hello")
        assert wait_settled(rt, info.id, timeout=SETTLE_S).state is AgentState.COMPLETED
        shown = limit_of(rt, stub.url)
        # admitted with the prompt plus 1024 expected tokens; the window keeps what it spent
        assert (shown.admitted, shown.in_flight, shown.tokens) == (1, 0, 42)


def test_a_call_larger_than_tokens_per_minute_fails_at_once(open_rt: OpenRuntime) -> None:
    with RateLimitedStub() as stub:
        rt = open_rt(
            [Profile("leaf", runner=stub_runner(stub, max_tokens=5000))],
            [ProviderLimit(stub.url, tokens_per_minute=1000)],
        )
        info = wait_settled(rt, rt.spawn("leaf", "hello").id, timeout=SETTLE_S)
        assert info.state is AgentState.FAILED
        assert info.error_type == "ProviderLimitExceeded"
        assert "tokens per minute" in (info.error or "")
        assert stub.requests == []


# -- 429s -----------------------------------------------------------------------------------


def test_a_429_lowers_the_level_and_successes_raise_it_again(open_rt: OpenRuntime) -> None:
    def answer(request: StubRequest) -> StubReply | None:
        if request.number == 1:
            return StubReply(status=429, error="slow down", error_type="requests")
        return StubReply(delay_s=0.05)

    with RateLimitedStub(answer) as stub:
        rt = open_rt([Profile("leaf", runner=stub_runner(stub))], [ProviderLimit(stub.url)])
        events: list[ProviderBackoff] = []
        rt.subscribe(lambda e: events.append(e) if isinstance(e, ProviderBackoff) else None)
        ids = [rt.spawn("leaf", f"task {i}", name=f"a{i}").id for i in range(8)]
        for agent in ids:
            assert wait_settled(rt, agent, timeout=SETTLE_S).state is AgentState.COMPLETED
        until(lambda: bool(events), "the back-off event")
        event = events[0]
        assert event.lowered and event.level_before is None and event.level is not None
        assert event.retry_after_s is None and event.rate_limited == 1
        assert event.match == stub.url and event.model == "openai/stub-model"
        assert event.path.startswith("/root/a")
        shown = limit_of(rt, stub.url)
        assert shown.rate_limited == 1 and len(events) == 1
        assert shown.level is not None and shown.level > event.level  # additive increase


def test_a_limit_the_providers_headers_state_holds_a_call_back_instead_of_a_429(
    open_rt: OpenRuntime,
) -> None:
    with RateLimitedStub(requests_per_minute=1, window_s=1.0) as stub:
        rt = open_rt(
            [Profile("leaf", runner=stub_runner(stub))],
            [ProviderLimit(stub.url)],
            provider_window_s=1.0,
        )
        first = rt.spawn("leaf", "first", name="first")
        assert wait_settled(rt, first.id, timeout=SETTLE_S).state is AgentState.COMPLETED
        shown = limit_of(rt, stub.url)
        assert (shown.stated_requests, shown.learned_requests) == (1, 1)
        # the answer said 1 request per window, none left: the next call waits for the
        # window instead of being sent into a 429 (without the headers it would be)
        second = rt.spawn("leaf", "second", name="second")
        assert wait_settled(rt, second.id, timeout=SETTLE_S).state is AgentState.COMPLETED
        assert stub.rate_limited == 0 and stub.report().admitted == 2


def test_a_429_whose_headers_show_requests_left_lowers_only_the_level(
    open_rt: OpenRuntime,
) -> None:
    room = {
        "x-ratelimit-limit-requests": "50",
        "x-ratelimit-remaining-requests": "40",
        "Retry-After": "0",
    }

    def answer(request: StubRequest) -> StubReply | None:
        if request.number == 1:
            return StubReply(status=429, error="too many at once", headers=room)
        return None

    with RateLimitedStub(answer) as stub:
        rt = open_rt([Profile("leaf", runner=stub_runner(stub))], [ProviderLimit(stub.url)])
        agent = rt.spawn("leaf", "task", name="a")
        assert wait_settled(rt, agent.id, timeout=SETTLE_S).state is AgentState.COMPLETED
        shown = limit_of(rt, stub.url)
        assert shown.rate_limited == 1 and shown.level is not None  # the level dropped
        assert shown.stated_requests == 50 and shown.learned_requests == 50


def test_a_retry_after_closes_the_whole_limit(open_rt: OpenRuntime) -> None:
    def answer(request: StubRequest) -> StubReply | None:
        if request.number == 1:
            return StubReply(status=429, error="wait", headers={"Retry-After": "2"})
        return None

    with RateLimitedStub(answer) as stub:
        rt = open_rt(
            [Profile("leaf", runner=stub_runner(stub, retry_base_s=0.001))],
            [ProviderLimit(stub.url, adaptive=False)],
        )
        first = rt.spawn("leaf", "first", name="first")
        until(lambda: limit_of(rt, stub.url).closed_until is not None, "the limit to close")
        other = rt.spawn("leaf", "other", name="other")
        until(lambda: "/root/other" in rt.diagnostics.admission_waiting, "the other call to wait")
        for agent in (first.id, other.id):
            assert wait_settled(rt, agent, timeout=SETTLE_S).state is AgentState.COMPLETED
        refused, *later = stub.requests
        # nothing the limit covers was sent before the Retry-After ended (a lower bound)
        assert all(r.at >= refused.at + 2.0 for r in later), [r.at - refused.at for r in later]
        assert {task_of(r) for r in later} == {"first", "other"}
        assert limit_of(rt, stub.url).rate_limited == 1


# -- fairness -------------------------------------------------------------------------------


def lead(turn: Any) -> str:
    """A tree: its task ``"<profile> <label> <n>"`` runs ``n`` children, tasks ``<label> i``."""
    profile, label, count = turn.task.split()
    turn.run_many([(profile, f"{label} {i}") for i in range(int(count))], timeout=SETTLE_S)
    return "done"


def test_a_small_tree_is_served_between_a_large_trees_calls(open_rt: OpenRuntime) -> None:
    holder = Holder()
    with RateLimitedStub(holder) as stub:
        rt = open_rt(
            [
                Profile("lead", runner=lead, subagents=["leaf"]),
                Profile("leaf", runner=stub_runner(stub)),
            ],
            [ProviderLimit(stub.url, max_in_flight=1, adaptive=False)],
            max_active_turns=16,
        )
        big = rt.spawn("lead", "leaf big 8", name="big")
        holder.held.wait(SETTLE_S)
        until(lambda: len(rt.diagnostics.admission_waiting) == 7, "the big tree's calls to wait")
        small = rt.spawn("lead", "leaf small 2", name="small")
        until(lambda: len(rt.diagnostics.admission_waiting) == 9, "the small tree's calls to wait")
        holder.free()
        for agent in (big.id, small.id):
            assert wait_settled(rt, agent, timeout=SETTLE_S).state is AgentState.COMPLETED
        order = [task_of(r).split()[0] for r in stub.requests]
        # start-time fair queuing: both trees waited from the same virtual time (the big one
        # first), then they alternate: the small tree never waits behind the big one's queue
        assert order[:6] == ["big", "big", "small", "big", "small", "big"], order


def test_priority_weighs_a_trees_share(open_rt: OpenRuntime) -> None:
    holder = Holder()
    with RateLimitedStub(holder) as stub:
        runner = stub_runner(stub)
        rt = open_rt(
            [
                Profile("lead", runner=lead, subagents=["plain", "vip"]),
                Profile("vip", runner=runner, priority=2.0),
                Profile("plain", runner=runner),
            ],
            [ProviderLimit(stub.url, max_in_flight=1, adaptive=False)],
            max_active_turns=16,
        )
        first = rt.spawn("plain", "first", name="first")
        holder.held.wait(SETTLE_S)
        trees = [rt.spawn("lead", f"{p} {p} 6", name=p) for p in ("vip", "plain")]
        until(lambda: len(rt.diagnostics.admission_waiting) == 12, "the calls to wait")
        holder.free()
        for agent in (first, *trees):
            assert wait_settled(rt, agent.id, timeout=SETTLE_S).state is AgentState.COMPLETED
        order = [task_of(r).split()[0] for r in stub.requests[1:]]
        assert order[:6].count("vip") == 4, order  # twice the share of a priority-1 tree


# -- interrupts and budgets -----------------------------------------------------------------


def test_an_interrupted_call_leaves_the_queue_unsent(open_rt: OpenRuntime) -> None:
    holder = Holder()
    with RateLimitedStub(holder) as stub:
        rt = open_rt(
            [Profile("leaf", runner=stub_runner(stub))],
            [ProviderLimit(stub.url, max_in_flight=1, adaptive=False)],
        )
        first = rt.spawn("leaf", "first", name="first")
        holder.held.wait(SETTLE_S)
        waiting = rt.spawn("leaf", "waiting", name="waiting")
        until(lambda: rt.diagnostics.admission_waiting == ("/root/waiting",), "the call to wait")
        assert limit_of(rt, stub.url).waiting == 1
        rt.interrupt(waiting.id)
        assert wait_settled(rt, waiting.id, timeout=SETTLE_S).state is AgentState.INTERRUPTED
        until(lambda: limit_of(rt, stub.url).waiting == 0, "the queue to empty")
        assert rt.diagnostics.admission_waiting == ()
        holder.free()
        assert wait_settled(rt, first.id, timeout=SETTLE_S).state is AgentState.COMPLETED
        shown = limit_of(rt, stub.url)
        assert (shown.admitted, shown.in_flight) == (1, 0)
        assert [task_of(r) for r in stub.requests] == ["first"]


def test_a_call_its_budget_refuses_never_waits_for_admission(open_rt: OpenRuntime) -> None:
    holder = Holder()
    with RateLimitedStub(holder) as stub:
        rt = open_rt(
            [Profile("leaf", runner=stub_runner(stub))],
            [ProviderLimit(stub.url, max_in_flight=1, adaptive=False)],
            tokens_per_agent=5,
        )
        spent = rt.spawn("leaf", "spend it", name="spent")
        holder.held.wait(SETTLE_S)
        holder.go.set()  # its one call crosses the budget
        assert wait_settled(rt, spent.id, timeout=SETTLE_S).state is AgentState.FAILED
        holder.held.clear()
        holder.go.clear()
        blocker_holder = Holder()
        stub.handler = blocker_holder
        stub.requests.clear()
        blocker = rt.spawn("leaf", "blocker", name="blocker")
        blocker_holder.held.wait(SETTLE_S)  # the one slot is taken until freed
        again = rt.follow_up(spent.id, "once more")
        info = wait_settled(rt, spent.id, again.generation, timeout=SETTLE_S)
        assert info.state is AgentState.FAILED and info.error_type == "TokenBudgetExceeded"
        assert rt.get(blocker.id).state is AgentState.RUNNING  # it settled while the slot was held
        assert limit_of(rt, stub.url).waiting == 0
        blocker_holder.free()
        wait_settled(rt, blocker.id, timeout=SETTLE_S)  # its own call crosses the budget too


# -- what retinue run shows -----------------------------------------------------------------


def test_retinue_run_shows_the_calls_waiting_for_admission(open_rt: OpenRuntime) -> None:
    from retinue.cli.follow import _Admission
    from retinue.cli.render import JsonView, PlainView

    holder = Holder()
    with RateLimitedStub(holder) as stub:
        rt = open_rt(
            [Profile("leaf", runner=stub_runner(stub))],
            [ProviderLimit(stub.url, max_in_flight=1)],
        )
        first = rt.spawn("leaf", "first", name="first")
        holder.held.wait(SETTLE_S)
        second = rt.spawn("leaf", "second", name="second")
        until(lambda: rt.diagnostics.admission_waiting == ("/root/second",), "the call to wait")
        plain, json_out = io.StringIO(), io.StringIO()
        for view in (PlainView(plain), JsonView(json_out)):
            _Admission(rt, ["/root/second"], view).check()
            _Admission(rt, ["/root/first"], view).check()  # not its tree: nothing waits there
        holder.free()
        for agent in (first.id, second.id):
            assert wait_settled(rt, agent, timeout=SETTLE_S).state is AgentState.COMPLETED
        url = stub.url
    (line,) = plain.getvalue().splitlines()
    assert line.endswith(
        f"1 model call waiting for admission; {url}: 1 in flight, 1 waiting, level 1"
    ), line
    (shown,) = [json.loads(text) for text in json_out.getvalue().splitlines()]
    assert shown["event"] == "admission_waiting" and shown["waiting"] == ["/root/second"]
    assert shown["limits"][0]["match"] == url and shown["limits"][0]["waiting"] == 1


def test_a_back_off_is_one_line_of_retinue_runs_plain_view() -> None:
    from retinue.cli.render import PlainView

    out = io.StringIO()
    view = PlainView(out)
    event = ProviderBackoff(
        agent_id="a1",
        path="/root/review",
        at=view.started + 1.5,
        model="openai/gpt-4.1-mini",
        match="openai",
        lowered=True,
        level_before=8.0,
        level=4.0,
        retry_after_s=2.0,
        rate_limited=3,
    )
    view.event(event, {})
    assert out.getvalue() == (
        "[   1.5s] /root/review  429 from openai/gpt-4.1-mini: provider limit openai backs off, "
        "level 8 -> 4, closed for 2s (Retry-After)\n"
    )


def test_retinue_runs_admission_line_shows_a_learned_rate() -> None:
    from retinue.cli.render import admission_line

    snap = LimitSnapshot(
        match="openai",
        kind="provider",
        in_flight=2,
        waiting=3,
        admitted=40,
        rate_limited=1,
        level=6.0,
        max_in_flight=None,
        requests_per_minute=None,
        tokens_per_minute=None,
        requests=0,
        tokens=0,
        closed_until=None,
        learned_requests=150,
        learned_tokens=40_000,
    )
    assert admission_line(["/root/a"], [snap]) == (
        "1 model call waiting for admission; openai: 2 in flight, 3 waiting, level 6, "
        "learned 150 requests/window, 1 x 429"
    )
    stated = msgspec.structs.replace(snap, stated_requests=500, learned_requests=500)
    assert admission_line([], [stated]) == (
        "0 model calls waiting for admission; openai: 2 in flight, 3 waiting, level 6, "
        "stated 500 requests/window, 1 x 429"
    )

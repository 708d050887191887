"""How an adaptive limit recovers after 429s: pace, regain, probe, tokens that follow, the level.

Pure logic with time passed in (a deterministic clock). The first tests pin
each rule of :mod:`retinue.protocol.provider_limits.learned` and
:mod:`~retinue.protocol.provider_limits.level` example by example; the last
drives the controller in simulated time against the benchmark's provider
(:class:`~retinue.testing.ProviderQuota`: requests per window and calls at
once, 429 + ``Retry-After``) and checks the figures the benchmark aims at.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field

import pytest

from retinue import InvalidLimits, ProviderLimit, Usage
from retinue.protocol.provider_limits import (
    AdaptiveLevel,
    AdmissionController,
    Admitted,
    LearnedRate,
    ModelCall,
    StatedLimits,
)
from retinue.testing import ProviderQuota


def rate(**kw: float) -> LearnedRate:
    args = {"window_s": 10.0, "slots": 10, "decrease": 0.9, "increase": 0.02, **kw}
    return LearnedRate(**args)  # type: ignore[arg-type]


def learn(learned: LearnedRate, count: int, tokens: int = 10, at: float = 0.0) -> None:
    """Admit ``count`` calls of ``tokens`` at ``at`` (none in flight), then a 429 teaches."""
    for _ in range(count):
        learned.admitted(tokens, at)
    assert learned.rate_limited(0, at + 0.5, tokens, None, 0)


def test_a_learned_rate_lets_calls_go_at_its_pace_not_in_one_burst() -> None:
    learned = rate(burst=0.1)
    learn(learned, 100)  # 90 per 10 s: 9 per second, at most 9 at once
    later = 30.0  # the window is empty, the bucket full
    admitted = 0
    while learned.fits(10, later):
        learned.admitted(10, later)
        admitted += 1
    assert admitted == 9
    assert learned.ready_at(10, later) == pytest.approx(later + 1 / 9)
    assert learned.fits(10, later + 1 / 9)


def test_with_a_whole_window_of_burst_the_window_alone_bounds_the_calls() -> None:
    learned = rate(burst=1.0)
    learn(learned, 100)
    later = 30.0
    admitted = 0
    while learned.fits(10, later):
        learned.admitted(10, later)
        admitted += 1
    assert admitted == 90


def test_a_clean_window_that_held_calls_back_regains_most_of_the_slack_at_once() -> None:
    learned = rate(burst=1.0)
    learn(learned, 100)
    assert learned.shown()[0] == 90
    for n in range(90):
        learned.admitted(10, 11.0 + n * 0.01)
    assert not learned.fits(10, 12.0)  # held back by the ceiling
    assert learned.fits(10, 30.0)  # a clean window later
    assert learned.shown()[0] == 95  # halfway from 0.9 x 100 to the 100 the provider let through


def test_past_the_regained_point_the_step_doubles_each_clean_window_up_to_max_step() -> None:
    learned = rate(burst=1.0, max_step=0.08)
    learn(learned, 100)
    seen = []
    for window in range(1, 6):
        start = 20.0 * window
        learned.fits(10, start)  # the raise of the clean window before
        seen.append(learned.shown()[0])
        while learned.fits(10, start + 1.0):
            learned.admitted(10, start + 1.0)  # fill it: the ceiling holds the next call back
    # 90 -> 95 (regained), then steps of 1.8 x 1, 2, 4, 4 (max_step 0.08 of 90 = 4 x 1.8)
    assert seen == [90, 95, 96, 100, 107]
    assert math.floor(learned.requests or 0) == 107
    learned.fits(10, 120.0)
    assert learned.shown()[0] == 114


def test_a_429_with_the_window_near_its_ceiling_sets_the_rate_again() -> None:
    learned = rate(burst=1.0)
    learn(learned, 100)
    learned.requests = 120.0  # probed past the provider's rate of 100
    for _ in range(100):
        learned.admitted(10, 40.0)
    assert learned.rate_limited(0, 40.5, 10, None, 0)  # 100 >= 0.9 x min(120, mark 100)
    assert learned.shown()[0] == 90
    for _ in range(50):
        learned.admitted(10, 60.0)
    assert not learned.rate_limited(0, 60.5, 10, None, 0)  # 50: far below, left to the level
    assert learned.shown()[0] == 90


def test_the_tokens_ceiling_follows_the_calls_size_until_a_429_shows_it_binds() -> None:
    learned = rate(burst=1.0)
    learn(learned, 100, tokens=10)  # 90 requests, 900 tokens per window
    for _ in range(40):
        learned.admitted(40, 30.0)  # the calls grew: 1600 tokens, 40 requests
    assert learned.fits(40, 30.1)  # the requests have room: the tokens follow
    assert learned.shown() == (90, 90 * 1640 // 41)
    learned = rate(burst=1.0)
    learn(learned, 100, tokens=10)
    for _ in range(60):
        learned.admitted(15, 30.0)  # 900 tokens but only 60 requests: the tokens ran out
    assert learned.rate_limited(0, 30.5, 15, None, 0)
    assert learned.shown() == (90, 810)  # the tokens set again alone; the requests kept
    for _ in range(10):
        learned.admitted(40, 50.0)
    assert learned.fits(40, 50.1)  # 400 + 40 <= 810
    learned.admitted(40, 50.1)
    assert not learned.fits(400, 50.2)  # no following now: the tokens bind


def test_ready_at_says_when_the_pace_or_the_window_lets_a_call_go() -> None:
    learned = rate(burst=0.05)  # at most 4.5 at once: 4
    learn(learned, 100)
    assert learned.ready_at(10, 0.6) > 0.6  # right after the 429 the bucket is empty
    for n in range(200):
        now = 20.0 + n * 0.05
        at = learned.ready_at(10, now)
        if learned.fits(10, now):
            learned.admitted(10, now)
            assert at == now
        else:
            assert at > now  # a waiting call is woken, never left without a time


def test_below_the_need_of_a_rate_the_level_climbs_one_call_per_success() -> None:
    level = AdaptiveLevel(floor=1, ceiling=None, decrease=0.5, increase=1.0, adaptive=True)
    assert level.rate_limited(40, None)
    assert level.value == 20
    for _ in range(10):
        level.succeeded(True, need=30.0)
    assert level.value == 30  # one per success up to the need
    level.succeeded(True, need=30.0)
    assert level.value == pytest.approx(30 + 1 / 30)  # then additively
    level.succeeded(False, need=100.0)
    assert level.value == pytest.approx(30 + 1 / 30)  # not in use: no raise


def test_the_controller_raises_the_level_to_what_the_learned_rate_needs() -> None:
    """Little's law: 90 requests per 10 s, calls of 1 s: 9 in flight, 1.5 x 9 with headroom."""
    c = AdmissionController([ProviderLimit("openai", rate_burst=1.0)], random.Random(0), 10.0)
    state = c._states["openai"]
    ids = itertools.count()
    flying = []
    for _ in range(100):
        call = ModelCall(str(next(ids)), "t", "openai/m", tokens=10)
        assert isinstance(c.try_admit(call, 0.0), Admitted)
        flying.append(call)
    for call in flying[:-1]:
        c.release(call, Usage(prompt_tokens=10, completion_tokens=0), 1.0, 200)
    c.release(flying[-1], None, 1.0, 429, None)  # a rate explains it: 99 let through
    assert c.snapshot(1.0)[0].learned_requests == 89
    state.level.value = 2.0  # as if 429s had halved it down
    for n in range(12):
        call = ModelCall(str(next(ids)), "t", "openai/m", tokens=10)
        c.try_admit(call, 20.0 + n)
        c.try_admit(ModelCall(str(next(ids)), "u", "openai/m", tokens=10), 20.0 + n)
        c.release(call, Usage(prompt_tokens=10, completion_tokens=0), 21.0 + n, 200)
    assert state.duration == pytest.approx(1.0)
    assert state.level.value >= 13.0  # 1.5 x 8.9 in flight, reached one call per success


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rate_max_step", 0.0),
        ("rate_max_step", 1.0),
        ("rate_burst", 0.0),
        ("rate_burst", 1.5),
        ("level_headroom", -1.0),
        ("level_headroom", float("inf")),
    ],
)
def test_bad_recovery_settings_are_typed_errors_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidLimits, match=field):
        ProviderLimit("openai", **{field: value})  # type: ignore[arg-type]


@dataclass
class BenchSim:
    """The benchmark in simulated time: ``trees`` x ``fanout`` agents making ``steps`` calls
    each through an adaptive-only limit, against a provider of :attr:`rate` requests per
    :attr:`window_s` and :attr:`concurrent` calls at once; calls take 0.1-0.3 s and their
    token estimates grow step by step (as a turn's prompt does)."""

    seed: int = 0
    trees: int = 10
    fanout: int = 16
    steps: int = 4
    rate: int = 160
    concurrent: int = 24
    window_s: float = 4.0
    stated: bool = False
    """Whether the provider states its limits in headers (OpenAI's ``x-ratelimit-*``)."""
    sent: list[float] = field(default_factory=list)
    refused: list[float] = field(default_factory=list)

    def run(self) -> BenchSim:
        rng = random.Random(self.seed)
        quota = ProviderQuota(
            requests_per_minute=self.rate, max_in_flight=self.concurrent, window_s=self.window_s
        )
        c = AdmissionController([ProviderLimit("openai")], random.Random(self.seed), self.window_s)
        events: list[tuple[float, int, str, tuple[int, int]]] = []
        order, ids = itertools.count(), itertools.count()
        calls: dict[str, tuple[int, int]] = {}

        def at(when: float, kind: str, agent: tuple[int, int]) -> None:
            heapq.heappush(events, (when, next(order), kind, agent))

        timer = [math.inf]

        def pump(now: float) -> None:
            for call in c.admit_waiting(now):
                self.sent.append(now)
                at(now + 0.01, "arrive", calls[call.id])
            wake = c.next_check(now)
            if wake is not None and (wake < timer[0] or timer[0] <= now):
                timer[0] = wake  # one timer: the earliest check asked for
                at(wake, "check", (0, 0))

        steps = dict.fromkeys(((t, a) for t in range(self.trees) for a in range(self.fanout)), 0)
        ids_of: dict[tuple[int, int], ModelCall] = {}
        said: dict[tuple[int, int], StatedLimits | None] = {}

        def headers(now: float) -> StatedLimits | None:
            """What the provider's answer at ``now`` states (None: it sends no headers)."""
            left = quota.remaining(now)[0]
            return StatedLimits(requests_limit=self.rate, requests_remaining=left)

        for agent in steps:
            at(rng.uniform(0.0, 0.2), "ask", agent)
        while events:
            now, _, kind, agent = heapq.heappop(events)
            if kind == "ask":
                estimate = 150 + 30 * steps[agent]  # each step's prompt holds the last answers
                call = ModelCall(f"c{next(ids)}", f"t{agent[0]}", "openai/m", tokens=estimate)
                calls[call.id], ids_of[agent] = agent, call
                if isinstance(c.try_admit(call, now), Admitted):
                    self.sent.append(now)
                    at(now + 0.01, "arrive", agent)
                pump(now)
            elif kind == "check":
                pump(now)
            elif kind == "arrive":
                refusal = quota.admit(340, now)
                said[agent] = headers(now) if self.stated else None
                if refusal is None:
                    at(now + rng.uniform(0.1, 0.3), "answer", agent)
                else:
                    self.refused.append(now)
                    c.release(
                        ids_of[agent], None, now + 0.01, 429, refusal.retry_after_s, said[agent]
                    )
                    pump(now + 0.01)
                    at(now + 0.01 + refusal.retry_after_s, "ask", agent)
            else:
                quota.done()
                spent = Usage(prompt_tokens=300, completion_tokens=40)
                c.release(ids_of[agent], spent, now, 200, stated=said[agent])
                steps[agent] += 1
                if steps[agent] < self.steps:
                    at(now, "ask", agent)
                pump(now)
        self.report = quota.report()
        return self

    def throughput(self) -> float:
        """Requests let through per full window after the first, as a share of the rate."""
        windows = self.report.windows[1:-1]
        return sum(w.requests for w in windows) / (len(windows) * self.rate)

    def late_share(self) -> float:
        late = [t for t in self.refused if t >= self.sent[0] + self.window_s]
        return len(late) / len(self.sent)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_benchmark_modelled_an_adaptive_limit_alone_nears_the_providers_rate(
    seed: int,
) -> None:
    sim = BenchSim(seed=seed, steps=8).run()
    assert sim.late_share() < 0.02
    # 0.89-0.91 here (0.80-0.81 before pacing, regain and the level's need)
    assert sim.throughput() >= 0.87, [w.requests for w in sim.report.windows]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_benchmark_modelled_with_the_providers_headers_reaches_its_rate(seed: int) -> None:
    sim = BenchSim(seed=seed, steps=8, stated=True).run()
    assert sim.late_share() == 0.0  # the 429s are the first burst's, too many at once
    # 0.94-0.95 here: the stated window counts a call until a window after it ends, as a
    # declared limit does (calls of 0.1-0.3 s); without the headers 0.89-0.90
    assert sim.throughput() >= 0.93, [w.requests for w in sim.report.windows]

"""The learned rate of an adaptive limit: requests (and tokens) per window learned from 429s.

Pure logic with time passed in. The first tests drive the controller against
a provider (:class:`~retinue.testing.ProviderQuota`, the rule the stub
enforces) that allows N requests per window and answers 429 above it, with
calls much shorter than the window: the case an in-flight level cannot
bound. The others pin the rule example by example.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

import pytest

from retinue import InvalidLimits, ProviderLimit, Usage
from retinue.protocol.provider_limits import AdmissionController, Admitted, LearnedRate, ModelCall
from retinue.testing import ProviderQuota

WINDOW_S = 10.0
RATE = 100  # requests per window the provider allows


@dataclass
class RateSim:
    """``agents`` agents calling back to back (calls of 50-200 ms) through the controller
    against a provider allowing :data:`RATE` requests per :data:`WINDOW_S`."""

    limit: ProviderLimit
    agents: int = 40
    until: float = 12 * WINDOW_S
    seed: int = 0
    quota: ProviderQuota = field(
        default_factory=lambda: ProviderQuota(requests_per_minute=RATE, window_s=WINDOW_S)
    )
    refused_at: list[float] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)

    def run(self) -> RateSim:
        rng = random.Random(self.seed)
        controller = AdmissionController([self.limit], random.Random(self.seed), WINDOW_S)
        events: list[tuple[float, int, str, object]] = []
        checks: set[float] = set()  # the times of the checks in ``events``
        order, ids = itertools.count(), itertools.count()

        def at(when: float, kind: str, what: object) -> None:
            heapq.heappush(events, (when, next(order), kind, what))

        def send(call: ModelCall, now: float) -> None:
            self.sent_at.append(now)
            at(now + 0.01, "arrive", call)

        def pump(now: float) -> None:
            for call in controller.admit_waiting(now):
                send(call, now)
            wake = controller.next_check(now)
            # A check due no later pumps then and asks next_check again: one is enough.
            if wake is not None and not any(t <= wake for t in checks):
                checks.add(wake)
                at(wake, "check", None)

        for agent in range(self.agents):
            at(rng.uniform(0.0, 1.0), "ask", agent)
        while events:
            now, _, kind, what = heapq.heappop(events)
            if now > self.until:
                break
            if kind == "ask":
                call = ModelCall(f"c{next(ids)}:{what}", f"t{what}", "openai/m", tokens=100)
                if isinstance(controller.try_admit(call, now), Admitted):
                    send(call, now)
                pump(now)
            elif kind == "check":
                checks.discard(now)
                pump(now)
            elif kind == "arrive":
                assert isinstance(what, ModelCall)
                refusal = self.quota.admit(100, now)
                agent = int(what.id.split(":")[1])
                if refusal is None:
                    at(now + rng.uniform(0.05, 0.2), "answer", what)
                else:
                    self.refused_at.append(now)
                    retry = float(refusal.retry_after_s)
                    controller.release(what, None, now + 0.01, 429, retry)
                    pump(now + 0.01)
                    at(now + 0.01 + retry, "ask", agent)
            elif kind == "answer":
                assert isinstance(what, ModelCall)
                self.quota.done()
                usage = Usage(prompt_tokens=100, completion_tokens=0)
                controller.release(what, usage, now, 200)
                pump(now)
                at(now, "ask", int(what.id.split(":")[1]))
        self.controller = controller
        return self

    def late_share(self) -> float:
        """The 429s after the first window, as a share of all the requests sent."""
        late = [t for t in self.refused_at if t >= WINDOW_S + 1.0]
        return len(late) / len(self.sent_at)

    def throughput(self) -> float:
        """The requests admitted after the first window, per window, as a share of the rate."""
        windows = self.quota.report().windows[1:-1]
        return sum(w.requests for w in windows) / (len(windows) * RATE)


def test_an_adaptive_limit_learns_the_providers_rate_and_keeps_429s_under_two_percent() -> None:
    sim = RateSim(ProviderLimit("openai")).run()
    assert sim.late_share() < 0.02, (len(sim.refused_at), len(sim.sent_at))
    assert sim.throughput() >= 0.9
    snap = sim.controller.snapshot(sim.until)[0]
    assert snap.learned_requests is not None and 0.8 * RATE <= snap.learned_requests <= 1.1 * RATE
    assert snap.learned_tokens is not None


def test_without_a_learned_rate_the_level_alone_pays_429s_every_window() -> None:
    """The same provider with ``learn_rate=False``: the in-flight level does not bound a rate."""
    learned = RateSim(ProviderLimit("openai")).run()
    level_only = RateSim(ProviderLimit("openai", learn_rate=False)).run()
    assert level_only.late_share() > 2 * learned.late_share()
    assert level_only.controller.snapshot(0.0)[0].learned_requests is None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_learned_rate_holds_for_other_seeds(seed: int) -> None:
    sim = RateSim(ProviderLimit("openai"), seed=seed).run()
    assert sim.late_share() < 0.02
    assert sim.throughput() >= 0.9


def rate(**kw: float) -> LearnedRate:
    args = {"window_s": 10.0, "slots": 10, "decrease": 0.9, "increase": 0.1, **kw}
    return LearnedRate(**args)  # type: ignore[arg-type]


def test_a_burst_still_in_flight_teaches_no_rate() -> None:
    learned = rate()
    for _ in range(50):
        learned.admitted(10, 0.0)
    assert not learned.rate_limited(49, 0.1, 10, None, 0)  # nothing ended: concurrency may explain
    assert learned.requests is None and learned.fits(10, 0.1)


def test_a_429_after_calls_went_through_sets_the_ceiling_below_what_was_admitted() -> None:
    learned = rate()
    slots = [learned.admitted(10, n * 0.1) for n in range(50)]  # 50 calls in 5 s, 2 still flying
    learned.refused(slots[-1], 10)  # the provider refused the last: it does not count
    assert learned.rate_limited(1, 5.0, 10, None, 0)
    assert learned.shown() == (44, 441)  # 0.9 x 49 requests, 0.9 x 490 tokens
    assert not learned.fits(10, 5.0)  # 49 in the window, above 44
    assert learned.held_back
    # the slots leave the window one by one: the first (0-1 s) at 11 s frees 10
    assert learned.ready_at(10, 5.0) == 11.0
    assert learned.fits(10, 11.0)


def test_a_stale_or_unexplained_429_teaches_nothing() -> None:
    learned = rate()
    for n in range(50):
        learned.admitted(10, n * 0.1)
    assert not learned.rate_limited(1, 5.0, 10, 0, 1)  # a call admitted before a decrease
    assert learned.requests is None


def test_calls_of_the_same_burst_refused_later_take_their_share_off_the_ceilings() -> None:
    learned = rate()
    slots = [learned.admitted(10, n * 0.1) for n in range(50)]
    learned.refused(slots[-1], 10)
    assert learned.rate_limited(4, 5.0, 10, 3, 3)  # 49 counted, 4 others still in flight
    assert learned.shown() == (44, 441)
    for slot in slots[-3:-1]:  # two of the four are refused too: admitted at epoch 3
        learned.refused(slot, 10)
        assert not learned.rate_limited(2, 5.1, 10, 3, 4)
    assert learned.shown() == (42, 423)  # 0.9 x 47 requests, 0.9 x 470 tokens


def test_a_clean_window_that_held_calls_back_raises_the_ceiling_by_one_step() -> None:
    learned = rate()
    for n in range(50):
        learned.admitted(10, n * 0.1)
    assert learned.rate_limited(0, 5.0, 10, None, 0)
    assert learned.shown()[0] == 45
    assert not learned.fits(10, 6.0)  # held back
    assert learned.fits(10, 20.0)  # a clean window later: the window is empty, the ceiling rose
    assert learned.shown()[0] == 49  # 45 + 0.1 x 45
    assert learned.fits(10, 40.0)  # a clean window, but nothing held back: no step
    assert learned.shown()[0] == 49


def test_a_429_below_the_rate_last_refused_does_not_ratchet_the_ceiling_down() -> None:
    learned = rate()
    for n in range(50):
        learned.admitted(10, n * 0.1)
    assert learned.rate_limited(0, 5.0, 10, None, 0)  # 50 in the window: learned 45
    for n in range(40):
        learned.admitted(10, 20.0 + n * 0.1)
    assert not learned.rate_limited(0, 24.0, 10, None, 0)  # 40 < 50 - 4.5: a concurrency 429
    assert learned.shown()[0] == 45
    for n in range(47):
        learned.admitted(10, 40.0 + n * 0.1)
    assert learned.rate_limited(0, 44.7, 10, None, 0)  # 47 >= 50 - 4.5: the rate again
    assert learned.shown()[0] == 42


def test_the_controller_counts_admissions_and_takes_a_refused_call_out() -> None:
    c = AdmissionController([ProviderLimit("openai")], random.Random(0), window_s=10.0)
    calls = [ModelCall(str(n), "t", "openai/m", tokens=5) for n in range(12)]
    for n, call in enumerate(calls[:10]):
        assert isinstance(c.try_admit(call, n * 0.1), Admitted)
        c.release(call, Usage(prompt_tokens=5, completion_tokens=0), n * 0.1 + 0.05, 200)
    assert isinstance(c.try_admit(calls[10], 1.0), Admitted)
    backoff = c.release(calls[10], None, 1.1, 429, 1.0)
    assert backoff is not None and backoff.learned_requests == 9  # 0.9 x the 10 not refused
    snap = c.snapshot(1.1)[0]
    assert (snap.learned_requests, snap.learned_tokens) == (9, 45)
    assert not isinstance(c.try_admit(calls[11], 2.5), Admitted)  # 10 in the window, above 9
    assert c.next_check(2.5) == pytest.approx(10.0 + 10 / 64 * 1)  # the first slot leaves


def test_a_limit_that_is_not_adaptive_or_does_not_learn_keeps_no_rate() -> None:
    limits = (ProviderLimit("openai", adaptive=False), ProviderLimit("openai", learn_rate=False))
    for limit in limits:
        c = AdmissionController([limit], random.Random(0), window_s=10.0)
        for n in range(5):
            call = ModelCall(str(n), "t", "openai/m")
            assert isinstance(c.try_admit(call, n * 0.1), Admitted)
            c.release(call, None, n * 0.1 + 0.05, 200 if n < 4 else 429, 1.0)
        assert c.snapshot(1.0)[0].learned_requests is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("learn_rate", 1),
        ("rate_decrease", 1.0),
        ("rate_decrease", 0),
        ("rate_increase", 0.0),
        ("rate_increase", 2),
        ("rate_slots", 0),
        ("rate_slots", 5000),
        ("rate_slots", 2.5),
    ],
)
def test_bad_learning_settings_are_typed_errors_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidLimits, match=field):
        ProviderLimit("openai", **{field: value})  # type: ignore[arg-type]

"""The admission controller's promises over random workloads (hypothesis, derandomized).

- never more calls in flight than a limit's level when one is admitted;
- no 60 s window holds more requests or tokens than a limit allows, counting
  what each call really spent (never more than its estimate here);
- after a Retry-After nothing the limit covers is admitted before it ends;
- the adaptive level stays within its floor and ceiling, goes down on a 429
  and back up on successes;
- every waiting call is admitted once the calls in flight end and time passes;
- fairness: trees that always have calls waiting take turns (weighted by
  priority), and Jain's index over their admissions is ~1.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from retinue import ProviderLimit, ProviderLimitExceeded, Usage
from retinue.protocol.provider_limits import (
    AdaptiveLevel,
    AdmissionController,
    Admitted,
    BackOff,
    ModelCall,
    Waiting,
)

SETTINGS = settings(max_examples=60, derandomize=True, deadline=None)
MODELS = ("openai/a", "openai/b")


@st.composite
def provider_limits(draw: st.DrawFn, match: str) -> ProviderLimit:
    top = draw(st.none() | st.integers(1, 6))
    return ProviderLimit(
        match,
        max_in_flight=top,
        requests_per_minute=draw(st.none() | st.integers(1, 12)),
        tokens_per_minute=draw(st.none() | st.integers(400, 3000)),
        adaptive=draw(st.booleans()),
        min_in_flight=draw(st.integers(1, top or 3)),
        decrease=draw(st.sampled_from([0.3, 0.5, 0.8])),
        jitter=draw(st.sampled_from([0.0, 0.25, 1.0])),
    )


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("ask"),
            st.integers(0, 2),
            st.sampled_from(MODELS),
            st.integers(0, 450),
            st.sampled_from([1.0, 2.0]),
            st.integers(1, 8),
        ),
        st.tuples(
            st.just("end"),
            st.integers(0, 50),
            st.sampled_from([200, 200, 429, None, 500]),
            st.floats(0.0, 1.0),
            st.sampled_from([None, 0.0, 3.0, 20.0]) | st.floats(0.0, 40.0),
        ),
        st.tuples(st.just("tick"), st.sampled_from([0.0, 0.5, 2.0, 10.0]) | st.floats(0.0, 30.0)),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
    ),
    min_size=8,
    max_size=60,
)


@dataclass
class Run:
    """A workload driven through a controller, with what it admitted and when."""

    controller: AdmissionController
    now: float = 0.0
    calls: dict[str, ModelCall] = field(default_factory=dict)
    flying: list[str] = field(default_factory=list)
    admitted_at: dict[str, float] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)  # the step that admitted each call
    spent: dict[str, int] = field(default_factory=dict)  # what an ended call really cost
    backoffs: list[tuple[int, BackOff]] = field(default_factory=list)
    count: int = 0
    step: int = 0

    def take(self, calls: list[ModelCall]) -> None:
        for x in calls:
            assert x.id not in self.admitted_at, "a call admitted twice"
            self.admitted_at[x.id] = self.now
            self.order[x.id] = self.step
            self.flying.append(x.id)
        self.check_levels(calls)

    def check_levels(self, admitted: list[ModelCall]) -> None:
        """A limit that admitted a call now has no more in flight than its level allows."""
        snaps = {s.match: s for s in self.controller.snapshot(self.now)}
        touched = {lim.match for x in admitted for lim in self.controller.matching(x)}
        for limit in self.controller.limits:
            snap = snaps[limit.match]
            top = limit.max_in_flight
            if snap.level is not None:
                assert limit.min_in_flight <= snap.level <= (top or math.inf) + 1e-9
                if limit.match in touched:
                    assert snap.in_flight <= max(limit.min_in_flight, math.floor(snap.level + 1e-9))
            else:
                assert top is None

    def ask(self, tree: int, model: str, tokens: int, weight: float, burst: int) -> None:
        for _ in range(burst):
            self.ask_one(tree, model, tokens, weight)

    def ask_one(self, tree: int, model: str, tokens: int, weight: float) -> None:
        self.count += 1
        call = ModelCall(f"c{self.count}", f"tree{tree}", model, tokens=tokens, weight=weight)
        try:
            answer = self.controller.try_admit(call, self.now)
        except ProviderLimitExceeded:
            tpms = [lim.tokens_per_minute or math.inf for lim in self.controller.matching(call)]
            assert tokens > min(tpms)
            return
        self.calls[call.id] = call
        own = [call] if isinstance(answer, Admitted) else []
        self.take(own + self.controller.admit_waiting(self.now))

    def end(self, pick: int, status: int | None, share: float, after: float | None) -> None:
        if not self.flying:
            return
        call = self.calls[self.flying.pop(pick % len(self.flying))]
        usage = None
        if status == 200:
            usage = Usage(prompt_tokens=math.floor(call.tokens * share), completion_tokens=0)
        backoff = self.controller.release(call, usage, self.now, status, after)
        self.spent[call.id] = (
            usage.prompt_tokens if usage is not None else 0 if status == 429 else call.tokens
        )
        if backoff is not None:
            self.backoffs.append((self.step, backoff))
        self.take(self.controller.admit_waiting(self.now))

    def tick(self, seconds: float) -> None:
        self.tick_to(self.now + seconds)

    def tick_to(self, now: float) -> None:
        self.now = max(self.now, now)
        self.take(self.controller.admit_waiting(self.now))

    def cost(self, call_id: str) -> int:
        return self.spent.get(call_id, self.calls[call_id].tokens)


def drive(controller: AdmissionController, ops: list[tuple[object, ...]]) -> Run:
    run = Run(controller)
    for op in ops:
        run.step += 1
        kind, *args = op
        if kind == "ask":
            run.ask(*args)  # type: ignore[arg-type]
        elif kind == "end":
            run.end(*args)  # type: ignore[arg-type]
        elif kind == "tick":
            run.tick(*args)  # type: ignore[arg-type]
        else:
            waiting = [c for c in run.calls if c not in run.admitted_at]
            if waiting:
                assert controller.cancel(waiting[args[0] % len(waiting)])  # type: ignore[operator]
                run.calls.pop(waiting[args[0] % len(waiting)])  # type: ignore[operator]
    return run


def check_windows(run: Run) -> None:
    """No 60 s window holds more requests or tokens of a limit than it allows."""
    for limit in run.controller.limits:
        mine = sorted(
            (at, run.cost(c))
            for c, at in run.admitted_at.items()
            if limit.covers(run.calls[c].model)
        )
        for end_at, _ in mine:
            window = [cost for at, cost in mine if at <= end_at < at + 60.0]
            if limit.requests_per_minute is not None:
                assert len(window) <= limit.requests_per_minute
            if limit.tokens_per_minute is not None:
                assert sum(window) <= limit.tokens_per_minute


def check_retry_after(run: Run) -> None:
    """Nothing a limit covers is admitted between a 429 and the end of its Retry-After."""
    for step, backoff in run.backoffs:
        if backoff.until is None:
            continue
        for c, when in run.admitted_at.items():
            later = run.order[c] >= step  # admitted by the step of the 429 or after
            if later and ProviderLimit(backoff.match).covers(run.calls[c].model):
                assert when >= backoff.until, (c, when, backoff)


@SETTINGS
@given(
    provider=provider_limits("openai"),
    model=st.none() | provider_limits("openai/a"),
    ops=OPS,
    seed=st.integers(0, 2**16),
)
def test_admissions_keep_every_limit(
    provider: ProviderLimit, model: ProviderLimit | None, ops: list[tuple[object, ...]], seed: int
) -> None:
    limits = [provider] if model is None else [provider, model]
    run = drive(AdmissionController(limits, random.Random(seed)), ops)
    check_windows(run)
    check_retry_after(run)
    # Liveness: once every call in flight ends and time passes, every waiting call flies.
    for _ in range(200):
        if not run.controller.waiting and not run.flying:
            break
        while run.flying:
            run.end(0, 200, 1.0, None)
        wake = run.controller.next_check(run.now)
        run.tick_to(wake if wake is not None else run.now)
    assert run.controller.waiting == 0
    assert set(run.admitted_at) == set(run.calls)
    check_windows(run)


@SETTINGS
@given(
    weights=st.lists(st.sampled_from([1.0, 1.0, 2.0, 3.0]), min_size=2, max_size=5),
    slots=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_trees_always_waiting_take_turns_by_weight(
    weights: list[float], slots: int, seed: int
) -> None:
    limit = ProviderLimit("openai", max_in_flight=slots, adaptive=False, jitter=0.0)
    c = AdmissionController([limit], random.Random(seed))
    c.on_rate_limited("openai", 1.0, 0.0)  # closed until 1.0: every tree starts waiting
    rng = random.Random(seed)
    served: dict[str, int] = defaultdict(int)
    flying: list[str] = []
    count = 0

    def top_up(tree: int, now: float) -> None:
        nonlocal count
        count += 1
        call = ModelCall(f"{count}", f"t{tree}", "openai/m", weight=weights[tree])
        assert isinstance(c.try_admit(call, now), Waiting)  # the trees always wait

    for tree in range(len(weights)):
        for _ in range(slots + 1):  # more than one pass can admit: never empty
            top_up(tree, 0.0)
    for step in range(1, 40 * len(weights)):
        for x in c.admit_waiting(float(step)):
            served[x.tree] += 1
            flying.append(x.id)
            top_up(int(x.tree[1:]), float(step))  # the tree keeps a call waiting
        shares = [served[f"t{i}"] / w for i, w in enumerate(weights)]
        assert max(shares) - min(shares) <= max(1.0 / w for w in weights) + 1e-9
        c.release(flying.pop(rng.randrange(len(flying))), None, float(step) + 0.5, 200)
    shares = [served[f"t{i}"] / w for i, w in enumerate(weights)]
    jain = sum(shares) ** 2 / (len(shares) * sum(x * x for x in shares))
    assert jain >= 0.99


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    ceiling=st.none() | st.integers(1, 8) | st.integers(1, 50),
    floor=st.integers(1, 5),
    decrease=st.floats(0.1, 0.9),
    increase=st.sampled_from([0.5, 1.0, 3.0]) | st.floats(0.1, 4.0),
    events=st.lists(st.tuples(st.booleans(), st.integers(0, 60), st.booleans()), max_size=80),
)
def test_the_adaptive_level_goes_down_on_429_up_on_success_and_stays_bounded(
    ceiling: int | None,
    floor: int,
    decrease: float,
    increase: float,
    events: list[tuple[bool, int, bool]],
) -> None:
    floor = min(floor, ceiling or floor)
    level = AdaptiveLevel(
        floor=floor, ceiling=ceiling, decrease=decrease, increase=increase, adaptive=True
    )
    top = math.inf if ceiling is None else ceiling
    for limited, in_flight, fresh in events:
        before = level.value
        if limited:
            lowered = level.rate_limited(in_flight, level.epoch if fresh else level.epoch - 1)
            if not fresh:
                assert not lowered and level.value == before  # one burst lowers once
            elif lowered:
                assert level.value <= before and (level.value < before or before <= floor)
        else:
            level.succeeded(busy=True)
            if before < top:
                assert before < level.value <= top
        assert floor <= level.value <= top
        assert level.cap() >= floor

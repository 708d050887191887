"""The admission controller in front of a provider in simulated time: the benchmark, modelled.

Trees of agents make model calls one after another; each call asks the
controller, reaches the provider (:class:`~retinue.testing.ProviderQuota`, the
rule :class:`~retinue.testing.RateLimitedStub` enforces) a little later, and is
answered after a latency, or refused with a 429 and a ``Retry-After`` that the
caller's retries wait out (as ``retinue.llm.retry`` does). Time is an event
queue, so every figure is exact for its seed and nothing sleeps. What it
shows, before the controller is wired into model calls: with the provider's
limits known, no 429 and full windows; with only an adaptive limit, few
429s; without admission, most calls refused; fair shares between trees, and
a small tree not starved by a big one.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from retinue import ProviderLimit, Usage
from retinue.protocol.provider_limits import AdmissionController, Admitted, ModelCall
from retinue.testing import ProviderQuota, QuotaReport

RPM, TPM, CONCURRENT = 300, 600_000, 32
KNOWN = ProviderLimit(
    "openai", max_in_flight=CONCURRENT, requests_per_minute=RPM, tokens_per_minute=TPM
)
COMPLETION_MAX = 400
DELAY_S = 0.01  # from admission to the provider, and from the provider's 429 back


@dataclass(frozen=True)
class Agent:
    tree: int
    number: int
    step: int = 0
    attempt: int = 0


@dataclass
class Simulation:
    """Agents making ``steps`` calls each against a provider, with or without admission."""

    limits: Sequence[ProviderLimit] | None  # None: admission off
    trees: Sequence[int]  # agents per tree
    steps: int = 6
    seed: int = 0
    weights: Sequence[float] = ()  # per tree (a profile's priority); none: 1 each
    quota: ProviderQuota = field(
        default_factory=lambda: ProviderQuota(
            requests_per_minute=RPM, tokens_per_minute=TPM, max_in_flight=CONCURRENT
        )
    )
    now: float = 0.0
    attempts: int = 0
    refused: int = 0
    waits: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    answered: list[tuple[float, int]] = field(default_factory=list)  # (time, tree)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        rng = random.Random(self.seed + 1)
        self.controller = AdmissionController(self.limits or (), rng)
        self.events: list[tuple[float, int, str, object]] = []
        self.order = itertools.count()
        self.ids = itertools.count()
        self.waiting: dict[str, tuple[Agent, float, int, int]] = {}
        self.timer: float | None = None

    def at(self, when: float, kind: str, what: object) -> None:
        heapq.heappush(self.events, (when, next(self.order), kind, what))

    def run(self) -> Simulation:
        for tree, agents in enumerate(self.trees):
            for number in range(agents):
                self.at(self.rng.uniform(0.0, 1.0), "ask", Agent(tree, number))
        while self.events:
            self.now, _, kind, what = heapq.heappop(self.events)
            getattr(self, f"on_{kind}")(what)
        return self

    def on_ask(self, agent: Agent) -> None:
        if agent.step >= self.steps:
            return
        prompt = self.rng.randint(800, 2000)
        completion = self.rng.randint(100, COMPLETION_MAX)
        call = ModelCall(
            f"c{next(self.ids)}",
            f"t{agent.tree}",
            "openai/m",
            tokens=prompt + COMPLETION_MAX,
            weight=self.weights[agent.tree] if self.weights else 1.0,
        )
        self.waiting[call.id] = (agent, self.now, prompt, completion)
        if self.limits is None:
            self.send(call)
            return
        if isinstance(self.controller.try_admit(call, self.now), Admitted):
            self.send(call)
        self.pump()

    def pump(self) -> None:
        """Let go what the controller admits now; wake up when it says to look again."""
        for call in self.controller.admit_waiting(self.now):
            self.send(call)
        wake = self.controller.next_check(self.now)
        if wake is not None and (self.timer is None or wake < self.timer or self.timer <= self.now):
            self.timer = wake
            self.at(wake, "check", None)

    def on_check(self, _: object) -> None:
        self.pump()

    def send(self, call: ModelCall) -> None:
        agent, asked, prompt, completion = self.waiting.pop(call.id)
        self.attempts += 1
        self.waits[agent.tree].append(self.now - asked)
        self.at(self.now + DELAY_S, "arrive", (call, agent, prompt, completion))

    def on_arrive(self, what: tuple[ModelCall, Agent, int, int]) -> None:
        call, agent, prompt, completion = what
        refusal = self.quota.admit(prompt + completion, self.now)
        if refusal is None:
            self.at(self.now + self.rng.uniform(1.0, 4.0), "answer", what)
            return
        self.refused += 1
        self.at(self.now + DELAY_S, "limited", (call, agent, float(refusal.retry_after_s)))

    def on_limited(self, what: tuple[ModelCall, Agent, float]) -> None:
        call, agent, retry_after = what
        if self.limits is not None:
            self.controller.release(call, None, self.now, 429, retry_after)
            self.pump()
        backoff = min(60.0, 2.0**agent.attempt) * self.rng.uniform(0.5, 1.0)
        retry = Agent(agent.tree, agent.number, agent.step, agent.attempt + 1)
        self.at(self.now + max(backoff, retry_after), "ask", retry)

    def on_answer(self, what: tuple[ModelCall, Agent, int, int]) -> None:
        call, agent, prompt, completion = what
        self.quota.done()
        self.answered.append((self.now, agent.tree))
        if self.limits is not None:
            usage = Usage(prompt_tokens=prompt, completion_tokens=completion)
            self.controller.release(call, usage, self.now, 200)
            self.pump()
        self.at(self.now, "ask", Agent(agent.tree, agent.number, agent.step + 1))

    @property
    def report(self) -> QuotaReport:
        return self.quota.report()

    def jain(self, until: float) -> float:
        """Jain's index of the calls each tree got answered by ``until``, per agent."""
        counts = [0.0] * len(self.trees)
        for when, tree in self.answered:
            if when <= until:
                counts[tree] += 1.0 / self.trees[tree]
        return sum(counts) ** 2 / (len(counts) * sum(x * x for x in counts))


def test_with_the_providers_limits_known_no_call_is_refused_and_windows_fill() -> None:
    sim = Simulation([KNOWN], [16] * 10).run()
    assert sim.refused == 0
    full = sim.report.windows[:-1]  # the last window is the tail of the run
    assert full and all(w.requests >= 0.9 * RPM for w in full)
    assert sim.report.max_requests_in_window <= RPM
    assert sim.jain(sim.now / 2) >= 0.95


def test_an_adaptive_limit_alone_learns_the_provider_from_few_429s() -> None:
    sim = Simulation([ProviderLimit("openai")], [16] * 10).run()
    assert sim.refused / sim.attempts < 0.05  # 13 of 973 attempts with this seed
    assert all(w.requests >= 0.9 * RPM for w in sim.report.windows[:-1])
    assert sim.jain(sim.now / 2) >= 0.95


def test_without_admission_most_calls_are_refused() -> None:
    off = Simulation(None, [16] * 10).run()
    known = Simulation([KNOWN], [16] * 10).run()
    assert off.refused / off.attempts > 0.3  # the baseline the controller is measured against
    assert known.now <= off.now  # and waiting for admission is not slower than 429s


def test_a_small_tree_is_not_starved_by_a_big_one() -> None:
    """One tree of 64 agents, one of 2: the small tree's calls wait far less."""
    sim = Simulation([KNOWN], [64, 2], steps=8).run()
    big, small = sim.waits[0], sim.waits[1]
    assert sum(small) / len(small) < 0.25 * sum(big) / len(big)
    assert sim.refused == 0


def test_weighted_trees_get_shares_by_priority() -> None:
    """Two equal trees, one whose calls have priority 3: it is answered about three times as
    often while both wait (a little less: its 32 agents are not always all waiting)."""
    sim = Simulation([KNOWN], [32, 32], steps=12, weights=[3.0, 1.0]).run()
    assert sim.refused == 0
    first = next(when for when, tree in sim.answered if tree == 0 and when > 0)
    half = sorted(when for when, tree in sim.answered if tree == 0)[len(sim.answered) // 4]
    counts = [sum(1 for when, t in sim.answered if t == tree and when <= half) for tree in (0, 1)]
    assert first <= half and 2.0 <= counts[0] / counts[1] <= 3.5, counts  # 193 / 77 here

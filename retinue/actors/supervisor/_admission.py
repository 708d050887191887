"""Call admission: a tree under a budget does not overshoot it with calls in flight.

With a token or cost budget set, a model turn asks before every call
(:class:`~retinue.actors.commands.AdmitCall`). A call is admitted only while
what its tree has spent plus an estimate for the tree's calls in flight stays
below ``tokens_per_tree`` (and ``usd_per_tree``); otherwise it waits, holding
its turn's slot, until a call in flight ends (its ``LlmStep`` with
``ends_call``, or its turn's end) and then asks again, first come first
served. Once a budget is spent the call is refused with the budget's error.

The estimate of a call is the largest call its agent made so far (at least
``Limits.call_reserve_tokens`` tokens when set), else the largest its tree
made; with none known yet (a tree's first calls, also after a reopen) the
call is admitted only alone, and nothing else of its tree is admitted while
it flies. So a tree overshoots its budget by less than one call as long as
no call is larger than its estimate (each that is adds what it is over).
Agent budgets need no admission: an agent makes one call at a time.
"""

from __future__ import annotations

import concurrent.futures
from collections import deque
from dataclasses import dataclass
from typing import Any

from retinue.actors import JDeque, JDict, Journaled, claim
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World
from retinue.errors import TurnInterrupted
from retinue.protocol.budgets import budget_error
from retinue.protocol.messages import Usage
from retinue.protocol.records import AgentRecord

__all__ = ["Admission", "Reservation"]


@dataclass(frozen=True, slots=True)
class Reservation:
    """A call in flight: its tree, and its estimate in tokens and USD (None: not known)."""

    top: str
    tokens: int | None
    usd: float | None


class Admission(Journaled):
    """Calls in flight per tree, their estimates, and the calls waiting. Supervisor thread only."""

    def __init__(self, world: World) -> None:
        """Admit calls in ``world`` against its limits' budgets."""
        j = self._journal = world.journal
        self.world = world
        self.flying: dict[str, Reservation] = JDict(j)  # agent id -> its call in flight
        self.waiting: dict[str, deque[tuple[str, concurrent.futures.Future[Any]]]] = JDict(j)
        # Agent or tree id -> its largest call so far, in tokens and in USD.
        self.largest_tokens: dict[str, int] = JDict(j)
        self.largest_usd: dict[str, float] = JDict(j)

    def admit(self, tx: Transition, me: AgentRecord) -> None:
        """Admit one call of the sending turn now, or queue it (the answer is deferred).

        Raises:
            TokenBudgetExceeded, CostBudgetExceeded: a budget is spent.
        """
        error = self._spent(me)
        if error is not None:
            raise error
        top = self.world.tree.top_of[me.id]
        queue = self.waiting.get(top)
        if not queue and self._fits(me, top):
            self._reserve(me, top)
            return
        queue = self.waiting.get(top)
        if queue is None:
            queue = self.waiting[top] = JDeque(self._journal)
        queue.append((me.id, tx.defer()))

    def _spent(self, me: AgentRecord) -> BaseException | None:
        tree = self.world.tree
        top = tree.agents[tree.top_of[me.id]]
        return budget_error(self.world.limits, me.path, me.usage, top.tree_usage, before=True)

    def _estimate(self, agent_id: str, top: str) -> tuple[int | None, float | None]:
        """A call's estimated tokens and cost (None: nothing to estimate from yet)."""
        reserve = self.world.limits.call_reserve_tokens
        tokens = self.largest_tokens.get(agent_id, self.largest_tokens.get(top))
        if reserve is not None:
            tokens = max(tokens or 0, reserve)
        return tokens, self.largest_usd.get(agent_id, self.largest_usd.get(top))

    def _fits(self, me: AgentRecord, top: str) -> bool:
        """Whether a call of ``me`` may fly now beside the tree's calls in flight."""
        limits = self.world.limits
        others = [r for a, r in self.flying.items() if r.top == top and a != me.id]
        if not others:
            return True
        tokens, usd = self._estimate(me.id, top)
        spent = self.world.tree.agents[top].tree_usage
        if limits.tokens_per_tree is not None:
            if tokens is None or any(r.tokens is None for r in others):
                return False
            if spent.total_tokens + sum(r.tokens or 0 for r in others) >= limits.tokens_per_tree:
                return False
        if limits.usd_per_tree is not None:
            if usd is None or any(r.usd is None for r in others):
                return False
            if spent.cost_usd + sum(r.usd or 0.0 for r in others) >= limits.usd_per_tree:
                return False
        return True

    def _reserve(self, me: AgentRecord, top: str) -> None:
        tokens, usd = self._estimate(me.id, top)
        self.flying[me.id] = Reservation(top, tokens, usd)

    def call_done(self, tx: Transition, me: AgentRecord, usage: Usage) -> None:
        """The call of ``me`` ended with ``usage`` (already added): its reservation ends."""
        top = self.world.tree.top_of[me.id]
        tokens, usd = usage.total_tokens, usage.cost_usd
        largest_tokens, largest_usd = self.largest_tokens, self.largest_usd
        # A top-level agent is its own tree: its one key is set once, not twice.
        for key in (me.id,) if top == me.id else (me.id, top):
            largest_tokens[key] = max(largest_tokens.get(key, 0), tokens)
            largest_usd[key] = max(largest_usd.get(key, 0.0), usd)
        if me.id in self.flying and self.flying.pop(me.id) is not None:
            self._admit_waiting(tx, top)

    def release(self, tx: Transition, agent_id: str, why: TurnInterrupted) -> None:
        """The turn of ``agent_id`` ended: its call in flight, or waiting, is forgotten, and
        so is its own estimate (its next turn starts from its tree's)."""
        if agent_id in self.largest_tokens:  # (checked in C: an absent key costs no call)
            del self.largest_tokens[agent_id]
        if agent_id in self.largest_usd:
            del self.largest_usd[agent_id]
        flew = self.flying.pop(agent_id) if agent_id in self.flying else None
        if flew is None and not self.waiting:  # nearly every turn: nothing in flight or waiting
            return
        top = flew.top if flew is not None else self.world.tree.top_of.get(agent_id)
        if top is None:
            return
        queue = self.waiting.get(top)
        if queue:
            for entry in [e for e in queue if e[0] == agent_id]:
                queue.remove(entry)
                if claim(self._journal, entry[1]):
                    tx.answer(entry[1], why)
        if flew is not None or queue:
            self._admit_waiting(tx, top)

    def forget_tree(self, top: str) -> None:
        """The top-level agent ``top`` closed (its tree with it): forget the tree's estimate."""
        self.largest_tokens.pop(top, None)
        self.largest_usd.pop(top, None)

    def _admit_waiting(self, tx: Transition, top: str) -> None:
        """Admit the tree's waiting calls, oldest first, while they fit (or refuse spent ones)."""
        queue = self.waiting.get(top)
        tree = self.world.tree
        while queue:
            agent_id, future = queue[0]
            me = tree.agents.get(agent_id)
            if me is None:
                queue.popleft()
                continue
            error = self._spent(me)
            if error is None and not self._fits(me, top):
                break
            queue.popleft()
            if not claim(self._journal, future):
                continue
            if error is None:
                self._reserve(me, top)
            tx.answer(future, error)
        if not queue:
            self.waiting.pop(top, None)

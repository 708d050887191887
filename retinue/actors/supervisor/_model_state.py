"""A model turn's stored state, as the supervisor keeps it: its transcript and its usage.

A model turn loads its stored transcript with its agent's and its tree's
usage as it starts (:class:`~retinue.actors.commands.LlmLoad`), and reports
each model step (:class:`~retinue.actors.commands.LlmStep`): the step's
usage is added to the agent and to its top-level agent's tree total, the
transcript is stored, and once the transcript holds the turn's input, that
input is the transcript's (a crash no longer hands it to the next turn).
The transcript carries the journal of the agent's tool calls
(:mod:`retinue.llm.turn._intents`); the agent's record counts its calls that
may have started without a result (``open_calls``: in doubt once its turn is
not running), and the events of calls a turn found in doubt are published
with the step that acts on them. A turn's last step goes with its settle
(``Settle.step``, :meth:`ModelState.last_step`): one transition, one commit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from retinue.actors import Journaled
from retinue.actors.commands import LlmStep, Settle
from retinue.actors.supervisor._admission import Admission
from retinue.actors.supervisor._scheduler import Scheduler
from retinue.actors.supervisor._transition import Transition
from retinue.actors.supervisor._world import World
from retinue.protocol.budgets import budget_error, has_budget
from retinue.protocol.failures import turn_error
from retinue.protocol.messages import AgentState, Usage
from retinue.protocol.records import AgentRecord

__all__ = ["ModelState"]

_NO_USAGE = Usage()
_RUNNING = AgentState.RUNNING  # a global: an enum member's lookup is a slow descriptor


class ModelState(Journaled):
    """Model turns' transcripts and usage, over one world. Supervisor thread only."""

    def __init__(self, world: World, scheduler: Scheduler, admission: Admission) -> None:
        """Serve over ``world``: turns run on ``scheduler``, model calls end in ``admission``."""
        self._journal = world.journal
        self.world = world
        self.scheduler = scheduler
        self.admission = admission
        self._budgeted = has_budget(world.limits)  # (a world's limits are fixed)

    def load(self, me: AgentRecord) -> tuple[bytes | None, Usage, Usage]:
        """Return the sender's stored transcript, its usage and its tree's usage."""
        world = self.world
        raw = world.store.get("transcripts", me.id.encode())
        top = world.tree.agents[world.tree.top_of[me.id]]
        return raw, me.usage, top.tree_usage

    def step(
        self,
        tx: Transition,
        me: AgentRecord,
        command: LlmStep,
        held: dict[str, Any] | None = None,
    ) -> tuple[Usage, Usage]:
        """Add one model step's usage to the sender and its tree; store its transcript.

        Returns the sender's usage and its tree's, as they stand after the step.
        ``held``: the caller writes the sender's record later in this same
        transition (a settle's last step): the sender's changes are put there
        instead of written now, unless a model call waits for admission (which
        is admitted against the stored totals; see :meth:`last_step`).
        """
        world = self.world
        tree = world.tree
        usage, transcript = command.usage, command.transcript
        if transcript is not None:
            tree.put_transcript(me.id, transcript)
        handle = self.scheduler.turns.get(me.id)
        if command.takes_input and handle is not None and handle.holds_input:
            self.scheduler.input_stored(me.id)  # the turn's input is the transcript's now
            tree.consume_inputs(me.id, me.generation, handle.turn.messages)
        if transcript is not None and handle is not None:  # so are its waits' receipts
            handover = handle.turn.handover
            if handover.kept:  # nearly every step: none (no call to say so)
                receipts = handover.consume(self._journal)
                stored = [event for held in receipts for event in held]
                tree.consume_inputs(me.id, me.generation, stored)
        for event in command.in_doubt:
            tx.emit(event)
        # One new record per agent: the sender's changes (and its tree's usage when it
        # is its tree's top agent) in one update, the top agent's in another. A step that
        # spent nothing changes the journal's count of open calls only: a running agent's
        # record is not rewritten for it (AgentRecord.open_calls; most tool steps' results).
        changes: dict[str, Any] = {}
        top_id = tree.top_of[me.id]
        spent = usage != _NO_USAGE
        if spent:
            added = changes["usage"] = me.usage.add(usage)
            if top_id == me.id:  # a tree whose total is its top agent's own (no other
                total = me.tree_usage  # agent spent): the same sum, made once
                changes["tree_usage"] = added if total == me.usage else total.add(usage)
        count = command.open_calls
        if count is not None:
            if changes or me.state is not _RUNNING:
                changes["open_calls"] = count  # the record is written anyway
            elif count != me.open_calls:  # a running turn's count waits for its next write
                tree.open_calls[me.id] = count
            elif me.id in tree.open_calls:  # (the check in C: a pop is two Python calls)
                del tree.open_calls[me.id]
        if changes:
            if held is not None and not self.admission.waiting:  # no call waits: none admitted
                held.update(changes)  # the settle's write carries them (one record, not two)
                if spent and top_id != me.id:
                    top = tree.agents[top_id]
                    world.update(
                        top, tree_usage=top.tree_usage.add(usage), updated_at=top.updated_at
                    )
                if command.ends_call:
                    self.admission.call_done(tx, me, usage)
                mine = changes.get("usage", me.usage)
                if top_id == me.id:
                    return mine, changes.get("tree_usage", me.tree_usage)
                return mine, tree.agents[top_id].tree_usage
            me = world.update(me, updated_at=me.updated_at, **changes)
        if spent and top_id != me.id:
            top = tree.agents[top_id]
            world.update(top, tree_usage=top.tree_usage.add(usage), updated_at=top.updated_at)
        if command.ends_call:  # after the usage: what waits is admitted against the new totals
            self.admission.call_done(tx, me, usage)
        return me.usage, tree.agents[top_id].tree_usage

    def last_step(
        self,
        tx: Transition,
        command: Settle,
        me: AgentRecord,
        held: dict[str, Any] | None = None,
    ) -> Settle:
        """Serve the last step a settle carries (``Settle.step``); return the settle to serve.

        ``me``: the sending turn's agent, which the caller found running that
        turn (as :meth:`World.sender` checks: a stale turn's step is dropped,
        as its ``LlmStep`` would be refused, and this is not called). The step
        is served as its :class:`LlmStep` would be, in the settle's
        transition, while the turn still runs. A turn that completes although
        its step crossed a budget (another agent of its tree spent meanwhile)
        fails with the budget's error instead, as its runner would have.

        ``held``: the sender's record changes the step makes may be put there
        instead of written (see :meth:`step`); the caller writes them with the
        settle's own record write (``Lifecycle.settle``), whatever the settle does.
        """
        step = command.step
        if step is None:
            return command
        agent, tree = self.step(tx, me, step, held)
        if command.error is not None or not self._budgeted:
            return command  # no budget to cross (budget_error's answer, without its tuples)
        error = budget_error(self.world.limits, me.path, agent, tree, before=False)
        if error is None:
            return command
        failed = turn_error(error, f"{type(error).__name__}: {error}")
        return dataclasses.replace(command, output=None, error=failed)

"""The race rules: host calls racing each other, the supervisor, cancellation and the close.

By theme: :mod:`~.waits` (host waits racing each other, cancelled waits, a
close), :mod:`~.inbox` (the host's inbox), :mod:`~.closing` (the runtime's
close or an interrupt racing a wait that was just answered), :mod:`~.loop`
(a close or an interrupt racing async turns whose start waits on the loop),
:mod:`~.remote` (a control-socket client's wait cancelled as an interrupt
answers it, and the wait sent right behind it). The ledger
(``host_ledger``) counts every completion id the host's waits returned; the
``drain`` rule here checks that every completion of every top-level agent
was received exactly once, before and after reopens, and that the host read
every message of its inbox exactly once. Hypothesis finds the rules by name
on the machine, so the split changes neither their set nor their order.
"""

from __future__ import annotations

import functools

from hypothesis.stateful import rule

from stress.statemachine.races.closing import CloseRaces
from stress.statemachine.races.inbox import InboxRaces
from stress.statemachine.races.loop import LoopRaces
from stress.statemachine.races.remote import RemoteRaces
from stress.statemachine.races.waits import WaitRaces
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["CloseRaces", "InboxRaces", "LoopRaces", "RaceRules", "RemoteRaces", "WaitRaces"]


class RaceRules(WaitRaces, InboxRaces, CloseRaces, LoopRaces, RemoteRaces):
    """Rules where host calls race each other, the supervisor and the runtime's close."""

    @rule()
    def drain(self) -> None:
        """The host receives everything left of every top-level agent: each id exactly once.

        Busy ones are waited for (the gate opens first), so afterwards every
        generation of every top-level agent has been received by the host,
        before or after reopens, once.
        """
        TRACE.append("drain")
        STATS["race:drain"] += 1
        self.harness.open_gate()
        self.sync()
        for agent in [a for a in self.agents.values() if a.parent_id is None]:
            while self.host_due(agent) is not None:
                done, error = self.call(
                    "wait", functools.partial(self.rt.wait, agent.id, timeout=0)
                )
                if error is not None:
                    fail(f"drain: wait on {agent.info.path} raised {error!r} with work left")
                self.host_received(agent, done, "drain", routed=True)
            want = {f"{agent.id}:{g}" for g in self.completed_generations(agent)}
            got = {cid for cid in self.host_ledger if cid.rsplit(":", 1)[0] == agent.id}
            if want != got:
                fail(f"drain: {agent.info.path} received {sorted(got)}, made {sorted(want)}")
        messages, error = self.call("messages", lambda: self.rt.messages(timeout=0))
        if error is not None:
            fail(f"drain: messages() raised {error!r}")
        self.host_read(messages, "drain: messages()")
        sent = {m.id for m in self.host_inbox()}
        ledger = self.host_inbox_ledger
        if set(ledger) != sent or any(n != 1 for n in ledger.values()):
            fail(f"drain: the host read {dict(ledger)}; agents sent it {sorted(sent)}")

"""Async turns whose start waits on the runtime's event loop, raced by a close or an interrupt.

An async runner's turn starts as a task on the runtime's one event loop
(``LoopTurns``): its start is committed, then handed to the loop, where the
task is made. A ``loophold`` turn (:data:`~stress.statemachine.data.LOOP_HOLD`)
blocks the loop's thread, so the starts handed to it meanwhile wait there.

- :meth:`LoopRaces.close_racing_turn_starts`: host threads spawn, run, send
  and follow up (async and sync agents) while the runtime closes: closed
  from another thread with the loop free or held (released at once or once
  the close interrupted the turns), or from the loop by the holder itself.
  Every call returns; each turn it started either completed (received once:
  the ledgers and ``drain``) or is ``interrupted`` in the store, never busy;
  nothing the host was told is lost, nothing it was refused was made; no
  task or call is left behind on the closed loop; the turns are restartable.
- :meth:`LoopRaces.interrupt_queued_loop_turns`: turns queued on the held
  loop (or still waiting for a slot) are interrupted or closed: with the
  loop held until then, their runners never run, and the inputs they were
  handed (a host message) reach the agent's next turn; with the release
  racing the interrupts, each runner either claimed its turn first or never
  runs (the harness checks every runner's start).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from retinue import AgentInfo, AgentState
from retinue.actors.supervisor._world import info_of
from retinue.errors import RetinueError, RuntimeClosed
from retinue.protocol.messages import Completion, Message
from retinue.testing.faults import inject_fault
from stress.statemachine.data import LIMITS, LOOP_HOLD, PARK_S, RUNNER_EXIT_S, SLOW_HOLD
from stress.statemachine.latches import HostCall
from stress.statemachine.model import Agent, Model
from stress.statemachine.storecheck import read_store
from stress.statemachine.trace import STATS, TRACE, fail

__all__ = ["LoopRaces"]

START_CALLS = ["spawn", "spawn", "spawn_sync", "run", "follow_up", "follow_up", "backup"]
"""The host calls that start a turn (``follow_up`` sends the agent a message first), and a
``backup``: its ``Barrier`` is served while the runtime closes, so it may reach the
supervisor's inbox behind the stop (it must be answered, or refused, never left waiting)."""

LOOP_RACES = st.one_of(
    st.tuples(
        st.just("close"),
        st.lists(st.sampled_from(START_CALLS), min_size=1, max_size=3),
        st.sampled_from(["none", "host", "loop"]),
        st.sampled_from([0.0, 0.0005, 0.002]),
        st.booleans(),
    ),
    st.tuples(
        st.just("interrupt"),
        st.lists(st.sampled_from(["spawn", "follow_up"]), min_size=1, max_size=3),
        st.sampled_from(["interrupt", "interrupt", "interrupt_tree", "close"]),
        st.booleans(),
    ),
    st.tuples(
        st.just("failed_close"),
        st.integers(1, 6),
        st.booleans(),
        st.integers(1, 2),
        st.sampled_from(["echo", "hold"]),
    ),
)
"""The loop races and their arguments (see :meth:`LoopRaces.loop_race`)."""

_BACKUPS = itertools.count()
"""Numbers the racing backups' folders (each needs its own)."""

LOOP_RACES_PER_EXAMPLE = 2
"""How many loop races one example runs at most (the CI and quick runs' time)."""

SETTLED_WAIT_S = 2.0
"""How long a held loop waits for the close to interrupt the blocker before it is let go
(whichever comes first: both orders are races the rule wants)."""


def _outcome(fn: Callable[[], Any]) -> Any:
    """Run one host call: what it returned, or the ``RetinueError`` it raised."""
    try:
        return fn()
    except RetinueError as exc:
        return exc


class LoopRaces(Model):
    """Rules where a close or an interrupt races async turns whose start waits on the loop."""

    # -- the rule --

    loop_races_run = 0  # in this example (each machine is one example)

    @precondition(
        lambda self: (
            self.loop_races_run < LOOP_RACES_PER_EXAMPLE
            and len(self.live()) <= LIMITS.max_agents - 5
        )
    )
    @rule(race=LOOP_RACES)
    def loop_race(self, race: tuple[Any, ...]) -> None:
        """One of the loop races, drawn with its arguments: ``("close", calls, hold, delay,
        release_at_once)`` (:meth:`close_racing_turn_starts`), ``("interrupt", starts,
        how, racing)`` (:meth:`interrupt_queued_loop_turns`) or ``("failed_close", at,
        slow, waiting, late)`` (:meth:`failed_close_racing_turn_starts`).

        One rule, not three, and at most :data:`LOOP_RACES_PER_EXAMPLE` times
        an example: each race but the interrupts closes and reopens the
        runtime (the failed close twice), which costs many steps' time, and a
        program of few rules may draw it at every other step.
        """
        self.loop_races_run += 1
        kind, *args = race
        if kind == "close":
            self.close_racing_turn_starts(*args)
        elif kind == "interrupt":
            self.interrupt_queued_loop_turns(*args)
        else:
            self.failed_close_racing_turn_starts(*args)

    # -- holding the loop --

    def _hold_loop(self, close_from_loop: bool) -> AgentInfo:
        """Spawn a top-level ``loophold`` turn and return once it blocks the event loop."""
        lt = self.harness.latches
        for event in (lt.loop_held, lt.loop_free, lt.closed_by_runner, lt.close_from_loop):
            event.clear()
        if close_from_loop:
            lt.close_from_loop.set()
        lt.hold_armed.set()
        try:
            info = self.rt.spawn("aecho", LOOP_HOLD)
        except BaseException:
            lt.hold_armed.clear()
            raise
        self.agents[info.id] = Agent(id=info.id, parent_id=None, info=info)
        if not lt.loop_held.wait(PARK_S):
            fail("the loop holder never blocked the event loop")
        return info

    def _idle_async(self, *, top: bool = False) -> list[Agent]:
        """Live ``aecho`` agents that settled, newest first, with room for a message and for
        two more completions nobody received (the turn a rule starts, and the next one);
        ``top``: top-level ones only (another's turn would wake its parent)."""
        delivered = self.delivered()
        return [
            a
            for a in reversed(self.live())
            if a.info.profile == "aecho"
            and (a.parent_id is None or not top)
            and a.info.state in (AgentState.COMPLETED, AgentState.FAILED)
            and len(self.unread(a)) < LIMITS.mailbox_capacity
            and len(self.undelivered(a, delivered)) <= LIMITS.pending_completions_per_agent - 2
        ]

    # -- the close racing turn starts --

    def close_racing_turn_starts(
        self, calls: list[str], hold: str, delay: float, release_at_once: bool
    ) -> None:
        """Host threads start turns as the runtime closes; every turn ends reported once.

        ``hold``: ``none`` closes from this thread after ``delay`` while the
        calls run; ``host`` holds the loop, lets the calls commit (or, with no
        ``delay``, just submit), closes from another thread and lets the loop
        go at once or once the close interrupted the holder; ``loop`` has the
        holder close the runtime from the loop itself once the calls are in.
        """
        op = (
            f"close_racing_turn_starts(calls={calls}, hold={hold}, delay={delay}, "
            f"release_at_once={release_at_once})"
        )
        TRACE.append(op)
        STATS["race:close_racing_turn_starts"] += 1
        h, lt = self.harness, self.harness.latches
        h.open_gate()
        self.sync()
        base = {i.id: i for i in self.rt.agents(include_closed=True)}
        loop = self.rt._system.executor.loop  # type: ignore[union-attr]  # below the API
        holder = self._hold_loop(hold == "loop") if hold != "none" else None
        # Top-level targets only: the close is judged against the store with every other
        # agent as it was before the race, and a child's turn would wake its parent.
        idle = self._idle_async(top=True)
        planned: list[tuple[str, Agent | None, HostCall[Any]]] = []
        for kind in calls:
            target = idle.pop(0) if kind == "follow_up" and idle else None
            planned.append((kind, target, HostCall(self._start_call(kind, target))))
        for _, _, call in planned:
            call.start()
        try:
            self._close_as(hold, planned, holder, delay, release_at_once)
        finally:
            lt.loop_free.set()
            lt.hold_armed.clear()
            lt.close_from_loop.clear()
        for _, _, call in planned:
            call.join(PARK_S)
        if any(call.is_alive() for _, _, call in planned):
            fail(f"{op}: a host call racing the close never returned")
        self._join_loop(loop)
        self._book_starts(op, base, planned, holder)

    def _start_call(self, kind: str, target: Agent | None) -> Callable[[], Any]:
        """The host call ``kind`` makes (a follow-up with no idle target spawns instead)."""
        # Only "echo": a telling runner cut by the close may have sent what it never heard
        # acknowledged, which the model cannot place (the close rules' concern, not this one's).
        rt, task = self.rt, "echo"
        if kind == "spawn_sync":
            return lambda: rt.spawn("echo", task)
        if kind == "run":
            return lambda: rt.run("aecho", task, timeout=PARK_S)
        if kind == "backup":
            copy = self.dir / f"backup-{next(_BACKUPS)}"
            return lambda: _outcome(lambda: rt.backup(copy))
        if kind == "follow_up" and target is not None:
            agent_id = target.id
            return lambda: (
                _outcome(lambda: rt.send(agent_id, "hi")),
                _outcome(lambda: rt.follow_up(agent_id, "echo")),
            )
        return lambda: rt.spawn("aecho", task)

    def _close_as(
        self,
        hold: str,
        planned: list[tuple[str, Agent | None, HostCall[Any]]],
        holder: AgentInfo | None,
        delay: float,
        release_at_once: bool,
    ) -> None:
        """Close the runtime as ``hold`` says, while the ``planned`` calls run."""
        h, lt = self.harness, self.harness.latches
        if hold == "none":
            if delay:
                time.sleep(delay)  # places the close among the calls (a race, not a wait)
            self.rt.shutdown()
            return
        deadline = time.monotonic() + PARK_S
        for kind, _, call in planned:  # submitted; committed too unless racing (no delay)
            if kind == "run" or not delay:
                call.waiting.wait(max(0.0, deadline - time.monotonic()))
            else:
                call.join(max(0.0, deadline - time.monotonic()))
        if hold == "loop":
            lt.loop_free.set()  # the holder closes the runtime from the loop
            if not lt.closed_by_runner.wait(PARK_S):
                fail("the loop holder's rt.shutdown() did not return")
            self.rt.shutdown()  # returns once the store is released
            return
        closer = threading.Thread(target=self.rt.shutdown, name="sm-closer")
        closer.start()
        if not release_at_once and holder is not None:  # the close interrupted the holder
            h.wait_settled_event((holder.id, 1), SETTLED_WAIT_S)
        lt.loop_free.set()
        closer.join(PARK_S)
        if closer.is_alive():
            fail("rt.shutdown() with the event loop held did not return once it was let go")

    @staticmethod
    def _join_loop(loop: Any) -> None:
        """Wait for the closed runtime's loop thread to end (its last passes run there)."""
        ident = loop.thread_id
        for thread in threading.enumerate():
            if thread.ident == ident and thread is not threading.current_thread():
                thread.join(PARK_S)
                if thread.is_alive():
                    fail("the closed runtime's event loop thread did not end")

    def _book_starts(
        self,
        op: str,
        base: dict[str, AgentInfo],
        planned: list[tuple[str, Agent | None, HostCall[Any]]],
        holder: AgentInfo | None,
    ) -> None:
        """Judge each call against the closed store, book it in the model, reopen."""
        records, _, _ = read_store(self.store_path)
        busy = [r.path for r in records.values() if r.state.has_turn]
        if busy:
            fail(f"{op}: the store holds busy agents after a clean close: {busy}")
        accepted: list[tuple[str, int]] = []  # the turns a call started, as the host was told
        made: set[str] = set() if holder is None else {holder.id}
        maybe_made = 0  # runs the close answered RuntimeClosed: their agent may exist
        runs: list[Completion] = []
        for kind, target, call in planned:
            outcome = call.outcome
            if kind == "follow_up" and target is not None:
                sent, started = outcome if isinstance(outcome, tuple) else (outcome, outcome)
                self._book_follow_up(op, target, sent, started, records, accepted)
                continue
            if kind == "backup":  # a copy, or refused by the close: never a hang
                if not isinstance(outcome, Path | RuntimeClosed):
                    fail(f"{op}: a backup racing the close ended {outcome!r}")
                STATS[f"loop_race_backup:{type(outcome).__name__}"] += 1
                continue
            if isinstance(outcome, RuntimeClosed):
                maybe_made += kind == "run"
                continue
            if isinstance(outcome, AgentInfo | Completion):
                agent_id = outcome.id if isinstance(outcome, AgentInfo) else outcome.agent_id
                if agent_id not in records:
                    fail(f"{op}: {kind} was answered {outcome}, but the store lost its agent")
                made.add(agent_id)
                accepted.append((agent_id, 1))
                if isinstance(outcome, Completion):
                    runs.append(outcome)
                continue
            fail(f"{op}: {kind} racing the close ended {outcome!r}")
        new = set(records) - set(base) - made
        if len(new) > maybe_made:
            fail(f"{op}: the store has agents no accepted call made: {sorted(new)}")
        before = dict(base)
        for agent_id in made | new:
            info = info_of(records[agent_id])
            self.agents[agent_id] = Agent(id=agent_id, parent_id=None, info=info)
            before[agent_id] = info
        for agent_id, _ in accepted:  # the follow-ups' too: as the store has them
            before[agent_id] = info_of(records[agent_id])
            self.agents[agent_id].info = before[agent_id]
        for done in runs:
            self.host_received(self.agents[done.agent_id], done, op, routed=True)
        self.reopen_closed(before)
        for agent_id, gen in accepted:
            state = self.agents[agent_id].info.state
            with self.harness.cond:
                ran = (agent_id, gen) in self.harness.turns
            if state is AgentState.COMPLETED and not ran:
                fail(f"{op}: turn {gen} of {agent_id} completed, but its runner never ran")
            STATS[f"loop_race_turn:{'ran' if ran else 'unrun'}:{state}"] += 1

    def _book_follow_up(
        self,
        op: str,
        target: Agent,
        sent: Any,
        started: Any,
        records: dict[str, Any],
        accepted: list[tuple[str, int]],
    ) -> None:
        """A send then a follow-up racing the close: each accepted or refused, never lost."""
        if isinstance(sent, Message):
            target.sent.append(sent)
        elif not isinstance(sent, RuntimeClosed):
            fail(f"{op}: send to {target.info.path} racing the close ended {sent!r}")
        old = target.info.generation
        stored = records[target.id].generation
        if isinstance(started, AgentInfo):
            if stored != old + 1:
                fail(f"{op}: follow_up of {target.info.path} was accepted; the store has {stored}")
            accepted.append((target.id, old + 1))
        elif isinstance(started, RuntimeClosed):
            if stored != old:
                fail(f"{op}: follow_up of {target.info.path} was refused; it started {stored}")
        else:
            fail(f"{op}: follow_up of {target.info.path} racing the close ended {started!r}")

    # -- interrupts racing a turn's start on the loop --

    def interrupt_queued_loop_turns(self, starts: list[str], how: str, racing: bool) -> None:
        """Turns whose start waits behind a held loop (or for a slot) are interrupted.

        Not ``racing``: the loop is let go only after every interrupt, so no
        runner of theirs ever runs, and a message sent to a follow-up's agent
        before it reaches the agent's next turn (the rule gives it one).
        ``racing``: the loop is let go as the interrupts land.
        """
        TRACE.append(f"interrupt_queued_loop_turns(starts={starts}, how={how}, racing={racing})")
        STATS["race:interrupt_queued_loop_turns"] += 1
        h, lt = self.harness, self.harness.latches
        h.open_gate()
        self.sync()
        idle = self._idle_async()
        self._hold_loop(False)
        queued: list[tuple[Agent, int, Message | None]] = []
        try:
            for start in starts:
                if start == "follow_up" and idle:
                    agent = idle.pop(0)
                    message = self.rt.send(agent.id, "hi")
                    agent.sent.append(message)
                    agent.info = self.rt.follow_up(agent.id, "echo")
                    queued.append((agent, agent.info.generation, message))
                else:
                    info = self.rt.spawn("aecho", "echo")
                    agent = Agent(id=info.id, parent_id=None, info=info)
                    self.agents[info.id] = agent
                    queued.append((agent, 1, None))
            if racing:
                lt.loop_free.set()
            for agent, _, _ in queued:
                self._stop_turn(agent, how)
        finally:
            lt.loop_free.set()
            lt.hold_armed.clear()
        self.sync()
        for agent, gen, given in queued:
            with h.cond:
                ran = (agent.id, gen) in h.turns
            STATS[f"loop_interrupt:{'ran' if ran else 'unrun'}"] += 1
            if racing:
                continue
            if ran:
                fail(f"{agent.info.path}'s turn {gen} ran though interrupted before its start")
            if given is None or agent.closed:
                continue
            self._follow_up_receives(agent, given)

    def _stop_turn(self, agent: Agent, how: str) -> None:
        """Interrupt (or close) ``agent``'s queued turn; it must stop, whatever it reached."""
        calls: dict[str, Callable[[], Any]] = {
            "interrupt": lambda: self.rt.interrupt(agent.id),
            "interrupt_tree": lambda: self.rt.interrupt_tree(agent.id),
            "close": lambda: self.rt.close(agent.id),
        }
        _, error = self.call(how, calls[how])
        if error is not None:
            fail(f"{how}({agent.info.path}) of a turn queued on the loop raised {error!r}")

    def _follow_up_receives(self, agent: Agent, message: Message) -> None:
        """The agent's next turn receives ``message``, which its interrupted turn gave back."""
        info, error = self.call("follow_up", lambda: self.rt.follow_up(agent.id, "echo"))
        if error is not None:
            fail(f"follow_up of {agent.info.path} after its interrupted start raised {error!r}")
        self.sync()
        got = self.received_messages().get(agent.id, [])
        if message.id not in got:
            fail(
                f"{agent.info.path}: {message.id}, given back by its turn interrupted before "
                f"it started, was not received by turn {info.generation}"
            )

    # -- a crash-like close racing the next turn's start --

    def failed_close_racing_turn_starts(self, at: int, slow: bool, waiting: int, late: str) -> None:
        """The runtime closes, but its Shutdown command fails at change ``at``: nothing is
        interrupted (a crash-like close) while async turns hold every slot and others
        (``late``: echo at once, or await the gate too) wait for one.

        The loop's close cancels the running turns' tasks itself (``slow``: all
        but the first take a while to end); each ends failed, not by its interrupt, its
        settle frees a slot and the next turn starts as the loop closes: that
        task must be cancelled and reported too, never left pending (the
        leftovers check), and no runner stays inside a turn. The store may
        keep turns busy, as after a crash; the reopen interrupts them, nothing
        stays busy with nothing to run it (quiescence), and a clean reopen then
        checks the store against the model.
        """
        TRACE.append(
            f"failed_close_racing_turn_starts(at={at}, slow={slow}, waiting={waiting}, late={late})"
        )
        STATS["race:failed_close_racing_turn_starts"] += 1
        h = self.harness
        h.open_gate()
        self.sync()
        h.close_gate()
        # The first holder's task ends at once when cancelled: its settle frees its slot
        # while the close still awaits the others (``slow``: they take SLOW_CANCEL_S).
        holders = [
            self._spawn_async(SLOW_HOLD if slow and n else "hold")
            for n in range(LIMITS.max_active_turns)
        ]
        deadline = time.monotonic() + PARK_S
        while True:  # every slot is held by a task awaiting the gate
            mark = h.mark()
            with h.cond:
                if all((a.id, 1) in h.in_gate for a in holders):
                    break
            if time.monotonic() > deadline:
                fail("the async holders never reached the gate")
            h.wait_activity(mark, 0.05)
        for _ in range(waiting):  # no slot: these wait, starting
            self._spawn_async(late)
        self.cut_by_close.update((i.id, i.generation) for i in self.rt.agents() if i.state.has_turn)
        inject_fault(self.rt, "Shutdown", at=at)
        with h.cond:
            h.close_failing = True
        try:
            self.rt.shutdown()
            h.wait_runners_exit(RUNNER_EXIT_S)
        finally:
            with h.cond:
                h.close_failing = False
            h.open_gate()
        self.check_left_behind("a close whose Shutdown command failed")
        self.rt = self._open()  # recovery: what the close left busy is interrupted now
        if self.rt.diagnostics:
            fail(f"the reopen after a failed close reported {self.rt.diagnostics}")
        self.sync()  # quiescence: nothing busy with nothing to run it
        self.reopen()  # a clean close: the store against the model

    def _spawn_async(self, task: str) -> AgentInfo:
        """Spawn a top-level ``aecho`` with ``task`` and book it."""
        info = self.rt.spawn("aecho", task)
        self.agents[info.id] = Agent(id=info.id, parent_id=None, info=info)
        return info

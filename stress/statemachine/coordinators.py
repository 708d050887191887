"""The coordinators' verbs: what ``boss``, ``lead``, ``mid`` (sync) and ``alead`` (async) do.

A task ``verb:profile:arg`` names what the turn does with a child: spawn it,
run it (spawn and wait), run a batch (one real wait, or two), and for the
async coordinator also await its messages and completion, retry a keyed
spawn, interrupt its subtree, or try a blocking call on the event loop.
Every completion or message a verb receives is logged in the turn's
:class:`~stress.statemachine.harness.TurnLog`, so the model knows every
receipt. Only a ``RetinueError`` may come out of a coordinator's calls (the
turn fails with it, which the model checks); anything else is a problem.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from retinue import Turn
from retinue.errors import BlockingCallInAsyncRunner, RetinueError, WaitTimeout
from retinue.protocol.messages import AgentState, Completion, Message
from stress.statemachine.data import (
    CHILD_TASK,
    LATCH,
    LIMITS,
    ON_PURPOSE,
    PARK_S,
    RUN_TIMEOUT_S,
    TURN_KEY,
)
from stress.statemachine.harness import Harness, TurnLog
from stress.statemachine.trace import STATS

__all__ = ["acoordinate", "coordinate"]


@contextlib.contextmanager
def _only_retinue_errors(h: Harness, turn: Turn, who: str) -> Iterator[None]:
    """Let a ``RetinueError`` through (the turn fails with it); record anything else, re-raised."""
    try:
        yield
    except RetinueError:
        raise  # the turn fails with it, which the model checks
    except Exception as exc:
        h.problem(
            f"turn {turn.task!r} of {turn.agent.path}: {who} call raised "
            f"non-retinue {type(exc).__name__}: {exc}"
        )
        raise


def _took(h: Harness, log: TurnLog, results: list[Completion | RetinueError]) -> str:
    """Log the completions a batch received; return its outcomes as text."""
    with h.cond:
        log.taken.extend(r.id for r in results if isinstance(r, Completion))
    return ",".join(
        str(r.status) if isinstance(r, Completion) else type(r).__name__ for r in results
    )


# -- the sync coordinators ----------------------------------------------------------------------


def coordinate(h: Harness, turn: Turn, log: TurnLog) -> str:
    """Run a sync coordinator's turn: a woken turn reports (or fails, while the machine makes
    wakes fail: it gives its children's completions back), a task's verb acts on children."""
    if turn.reason == "wake":
        if h.fail_wakes:
            STATS[f"wakes_failed{'_with_inputs' if turn.messages else ''}"] += 1
            raise ValueError(ON_PURPOSE)
        return f"woke:{len(turn.messages)}"
    verb, _, rest = turn.task.partition(":")
    profile, _, name = rest.partition(":")
    with _only_retinue_errors(h, turn, "coordinator"):
        done = _verb(h, turn, log, verb, profile, name)
    if done is not None:
        return done
    if verb == "fail":
        raise ValueError(ON_PURPOSE)
    if verb == "cancel":  # a CancelledError nobody asked for: a failure, not an interrupt
        STATS["runners_cancelled_themselves"] += 1
        raise asyncio.CancelledError(ON_PURPOSE)
    return f"did:{turn.task}:{len(turn.messages)}"


def _verb(h: Harness, turn: Turn, log: TurnLog, verb: str, profile: str, name: str) -> str | None:
    """Do a sync coordinator's verb; None for a verb it does not know (it just echoes)."""
    if verb == "spawn":
        info = turn.spawn(profile, CHILD_TASK.get(profile, "echo"), name=name or None)
        return f"spawned:{info.name}"
    if verb == "run":
        done = turn.run(profile, CHILD_TASK.get(profile, "echo"), timeout=RUN_TIMEOUT_S)
        with h.cond:
            log.taken.append(done.id)
        return f"ran:{done.status}"
    if verb == "many2":
        results = turn.run_many([("echo", "echo"), ("gated", "hold")], timeout=RUN_TIMEOUT_S)
        return "many2:" + _took(h, log, results)
    if verb == "many":
        # One real wait per batch (the other entry is refused, or the batch is over
        # the fan-out cap): run_many that took one completion and then raised on the
        # next wait would hide what it took, and the model must know every receipt.
        # Two real waits ("many2"): a batch that ends in an error gives back what it
        # had received, so the runner sees the batch's completions all or none.
        batch = [(profile or "echo", "echo"), ("ghost", "x")]
        if name == "wide":
            batch = [("echo", "echo")] * (LIMITS.fanout_cap + 1)
        results = turn.run_many(batch, timeout=RUN_TIMEOUT_S)
        return "many:" + _took(h, log, results)
    return None


# -- the async coordinator ----------------------------------------------------------------------


async def acoordinate(h: Harness, turn: Turn, log: TurnLog) -> str:
    """Run the async coordinator's turn: every verb awaits the turn's ``*_async`` twins (a
    failing wake raises a ``CancelledError`` of its own: a failure, not an interrupt)."""
    if turn.reason == "wake":
        if h.fail_wakes:
            STATS[f"wakes_failed{'_with_inputs' if turn.messages else ''}"] += 1
            STATS["runners_cancelled_themselves"] += 1
            raise asyncio.CancelledError(ON_PURPOSE)
        return f"woke:{len(turn.messages)}"
    verb, _, rest = turn.task.partition(":")
    profile, _, arg = rest.partition(":")
    profile = profile or "aecho"
    with _only_retinue_errors(h, turn, "async coordinator"):
        done = await _averb(h, turn, log, verb, profile, arg)
    if done is not None:
        return done
    if verb == "fail":
        raise ValueError(ON_PURPOSE)
    if verb == "cancel":
        STATS["runners_cancelled_themselves"] += 1
        raise asyncio.CancelledError(ON_PURPOSE)
    return f"adid:{turn.task}:{len(turn.messages)}"


async def _averb(
    h: Harness, turn: Turn, log: TurnLog, verb: str, profile: str, arg: str
) -> str | None:
    """Do the async coordinator's verb; None for a verb it does not know (it just echoes)."""
    if verb == "aspawn":
        info = await turn.spawn_async(profile, CHILD_TASK.get(profile, "echo"))
        return f"spawned:{info.name}"
    if verb == "arun":
        done = await turn.run_async(profile, CHILD_TASK.get(profile, "echo"), timeout=RUN_TIMEOUT_S)
        with h.cond:
            log.taken.append(done.id)
        return f"ran:{done.status}"
    if verb == "await":
        return await _await_child(h, turn, log, profile, arg)
    if verb == "amany":  # one real wait per batch, as for the sync run_many
        batch = [(profile, "echo"), ("ghost", "x")]
        results = await turn.run_many_async(batch, timeout=RUN_TIMEOUT_S)
        return "amany:" + _took(h, log, results)
    if verb == "abatch":  # two real waits; with the latch, the hand-over race's batch
        return await _abatch(h, turn, log, arg)
    if verb == "twice":  # a retried spawn with the same key makes no second child
        return await _twice(h, turn, profile)
    if verb == "itree":  # interrupt a child's subtree from the turn, then wait on it
        return await _itree(h, turn, log, profile)
    if verb == "blocking":
        return _blocking(h, turn)
    return None


async def _abatch(h: Harness, turn: Turn, log: TurnLog, arg: str) -> str:
    """``run_many_async`` of an ``echo`` and a second child (held on the latch, if armed)."""
    timeout = RUN_TIMEOUT_S
    if arg == LATCH:
        if h.latches.claim_handover((turn.agent.id, turn.agent.generation)):
            timeout = PARK_S
        h.latches.handover_waiting.set()
    second = ("echo", LATCH) if arg == LATCH else ("aecho", "echo")
    results = await turn.run_many_async([("echo", "echo"), second], timeout=timeout)
    outcomes = _took(h, log, results)
    STATS["async_batches"] += 1
    return "abatch:" + outcomes


async def _await_child(h: Harness, turn: Turn, log: TurnLog, profile: str, arg: str) -> str:
    """Spawn a child, then ``wait_async`` on it: its messages, then its completion."""
    timeout = RUN_TIMEOUT_S
    task = CHILD_TASK.get(profile, "echo")
    armed = False
    if arg == LATCH:
        task = LATCH
        armed = h.latches.claim_handover((turn.agent.id, turn.agent.generation))
        if armed:
            timeout = PARK_S
    child = await turn.spawn_async(profile, task)
    for _ in range(3):
        if armed:  # the wait is submitted in this same loop step, before the blocker runs
            h.latches.handover_waiting.set()
        try:
            event = await turn.wait_async(child.id, timeout=timeout)
        except WaitTimeout:
            return "await:timeout"
        with h.cond:
            if isinstance(event, Completion):
                log.taken.append(event.id)
                STATS["async_wait_completions"] += 1
                return f"await:{event.status}"
            log.waited.append(event.id)
            STATS["async_wait_messages"] += 1
    return "await:messages"


async def _twice(h: Harness, turn: Turn, profile: str) -> str:
    """Spawn with an idempotency key, then again with the same key: the same child."""
    first = await turn.spawn_async(profile, "echo", idempotency_key=TURN_KEY)
    again = await turn.spawn_async(profile, "echo", idempotency_key=TURN_KEY)
    STATS["idempotent_turn_spawns"] += 1
    if again.id != first.id:
        h.problem(
            f"{turn.agent.path}: a retried spawn with key {TURN_KEY!r} made "
            f"{again.path} besides {first.path}"
        )
    return f"twice:{first.name}"


async def _itree(h: Harness, turn: Turn, log: TurnLog, profile: str) -> str:
    """Spawn a child, interrupt its subtree from the turn, then wait on it."""
    child = await turn.spawn_async(profile, "hold")
    infos = await turn.interrupt_tree_async(child.id)
    STATS["turn_interrupt_tree"] += 1
    if [i.id for i in infos] != [child.id] or infos[0].state not in (
        AgentState.INTERRUPTED,
        AgentState.COMPLETED,
    ):
        h.problem(f"{turn.agent.path}: interrupt_tree_async({child.path}) gave {infos}")
    event = await turn.wait_async(child.id, timeout=RUN_TIMEOUT_S)
    with h.cond:
        if isinstance(event, Completion):
            log.taken.append(event.id)
        else:
            log.waited.append(event.id)
    return f"itree:{event.kind if isinstance(event, Message) else event.status}"


def _blocking(h: Harness, turn: Turn) -> str:
    """A blocking call on the event loop must be refused."""
    try:
        turn.spawn("echo", "echo")  # a blocking call on the event loop
    except BlockingCallInAsyncRunner:
        STATS["blocking_refused"] += 1
        return "refused"
    h.problem(f"{turn.agent.path}: a blocking spawn ran on the loop")
    return "blocked the loop"

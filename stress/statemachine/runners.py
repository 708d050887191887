"""The team's runners: each logs its turn in the harness, then echoes, holds, tells or coordinates.

Leaves: ``echo`` (settles at once, fails on purpose, returns a non-string,
messages its parent or the host's inbox, holds on the latch, closes the
runtime when a race rule armed it), ``gated`` (blocks on the harness's gate,
honouring ``turn.cancelled``) and their async twin ``aecho`` (which awaits the
gate, and blocks the event loop when the hand-over race armed it). The
coordinators' verbs are in :mod:`stress.statemachine.coordinators`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from retinue import Profile, Turn
from retinue.errors import MailboxFull, NotPermitted, RetinueError
from retinue.protocol.messages import Message
from stress.statemachine.coordinators import acoordinate, coordinate
from stress.statemachine.data import (
    ASYNC_PROFILES,
    COORDINATORS,
    GATE_POLL_S,
    HOST,
    LATCH,
    LOOP_HOLD,
    LOOP_SHUTDOWN,
    ON_PURPOSE,
    PARK_S,
    SHUTDOWN,
    SLOW_CANCEL_S,
    SLOW_HOLD,
    SUBAGENTS,
    WAKES,
    error_text,
)
from stress.statemachine.harness import Harness, TurnLog
from stress.statemachine.trace import STATS

__all__ = ["Runners", "team"]


def team(harness: Harness) -> list[Profile]:
    """The profiles the machine's runtimes run, their runners logging into ``harness``."""
    runners = Runners(harness)
    return [
        Profile(
            name,
            subagents=list(SUBAGENTS[name]),
            runner=runners.runner(name),
            wake_on_completion=WAKES[name],
        )
        for name in SUBAGENTS
    ]


def _addressee(turn: Turn) -> tuple[str, str | None]:
    """Whom a telling task messages (its parent, or the host's inbox) and with which dedup key."""
    to = HOST if turn.task == "tellhost" else turn.agent.parent_path
    return to, "t" if turn.task == "tell" else None


class Runners:
    """The runner of every profile, logging each turn into one :class:`Harness`."""

    def __init__(self, harness: Harness) -> None:
        """Log into ``harness``."""
        self.harness = harness

    def runner(self, profile: str) -> Callable[[Turn], Any]:
        """Return the logging runner of ``profile`` (``async def`` for the async profiles)."""
        h = self.harness

        def body(turn: Turn, log: TurnLog) -> Any:
            if profile in COORDINATORS:
                return coordinate(h, turn, log)
            if profile == "gated":
                return self.gated(turn)
            return self.echo(turn)

        async def abody(turn: Turn, log: TurnLog) -> Any:
            if profile == "alead":
                return await acoordinate(h, turn, log)
            return await self.aecho(turn)

        def run(turn: Turn) -> str:
            log = h.enter(turn, profile)
            try:
                result = body(turn, log)
            except BaseException as exc:
                h.leave(turn, log, exc=exc)
                raise
            h.leave(turn, log, result=result)
            return result  # type: ignore[no-any-return]

        async def arun(turn: Turn) -> str:
            log = h.enter(turn, profile)
            try:
                result = await abody(turn, log)
            except BaseException as exc:
                h.leave(turn, log, exc=exc)
                raise
            h.leave(turn, log, result=result)
            return result  # type: ignore[no-any-return]

        return arun if profile in ASYNC_PROFILES else run

    # -- the leaves --

    def echo(self, turn: Turn) -> Any:
        """Settle at once (or fail, return a non-string, close the runtime, hold, tell)."""
        h, latches = self.harness, self.harness.latches
        if turn.task == "fail":
            raise ValueError(ON_PURPOSE)
        if turn.task == "cancel":  # not an interrupt: the turn fails (its inputs go back)
            STATS["runners_cancelled_themselves"] += 1
            raise asyncio.CancelledError(ON_PURPOSE)
        if turn.task == "bad":
            return 42  # not a string: the turn must fail
        if turn.task == SHUTDOWN and h.runtime is not None and latches.shutdown_armed.is_set():
            latches.shutdown_armed.clear()  # once: a resumed or woken turn only echoes
            h.runtime.shutdown()  # close the runtime from this runner
            latches.closed_by_runner.set()
            return "closed the runtime"
        if turn.task == LATCH:  # held until the hand-over rule lets it go (or cancelled)
            while not latches.latch.wait(GATE_POLL_S) and not turn.cancelled.is_set():
                pass
        if turn.task in ("tell", "tell2", "tellhost"):  # message the parent (or the host)
            to, key = _addressee(turn)
            try:
                message = turn.send(to, self._content(turn), dedup_key=key)
            except BaseException as exc:
                self._refused(turn, to, exc)
                raise
            self._told(turn, to, key, message)
        return f"echo:{turn.task}:{len(turn.messages)}"

    async def aecho(self, turn: Turn) -> Any:
        """The async echo: awaits the gate, and blocks the loop when the hand-over armed it."""
        h, latches = self.harness, self.harness.latches
        if turn.task == "fail":
            raise ValueError(ON_PURPOSE)
        if turn.task == "cancel":
            STATS["runners_cancelled_themselves"] += 1
            raise asyncio.CancelledError(ON_PURPOSE)
        if turn.task == "bad":
            return 42
        if turn.task == "hold":  # the gate, awaited: the loop stays free
            return await self.agated(turn)
        if turn.task == SLOW_HOLD:  # the same, and its task takes a while to end when cancelled
            try:
                return await self.agated(turn)
            except asyncio.CancelledError:
                await asyncio.sleep(SLOW_CANCEL_S)  # a runner's clean-up, after the cancel
                raise
        if turn.task == LOOP_SHUTDOWN and h.runtime is not None and latches.handover_armed.is_set():
            latches.handover_armed.clear()
            latches.loop_held.set()
            latches.loop_free.wait(PARK_S)  # blocks the runtime's event loop on purpose
            h.runtime.shutdown()  # close the runtime from its own event loop
            latches.closed_by_runner.set()
            return "closed the runtime from the loop"
        if turn.task == LOOP_HOLD and latches.hold_armed.is_set():
            latches.hold_armed.clear()  # once: a resumed turn only echoes
            latches.loop_held.set()
            latches.loop_free.wait(PARK_S)  # blocks the runtime's event loop on purpose
            if latches.close_from_loop.is_set() and h.runtime is not None:
                latches.close_from_loop.clear()
                h.runtime.shutdown()  # close the runtime from its own event loop
                latches.closed_by_runner.set()
            return "held the loop"
        if turn.task in ("tell", "tell2", "tellhost"):
            to, key = _addressee(turn)
            try:
                message = await turn.send_async(to, self._content(turn), dedup_key=key)
            except BaseException as exc:
                self._refused(turn, to, exc)
                raise
            self._told(turn, to, key, message)
        return f"aecho:{turn.task}:{len(turn.messages)}"

    async def agated(self, turn: Turn) -> str:
        """Await the gate without blocking the loop (cancelled when interrupted)."""
        h = self.harness
        key = (turn.agent.id, turn.agent.generation)
        with h.cond:
            h.in_gate.add(key)
            h.bump()
        try:
            while True:
                with h.cond:
                    if h.gate_open:
                        break
                await asyncio.sleep(GATE_POLL_S)  # cancelled here when interrupted
        finally:
            with h.cond:
                h.in_gate.discard(key)
                h.bump()
        return f"agated:{turn.task}"

    def gated(self, turn: Turn) -> str:
        """Block until the gate opens or the turn is cancelled."""
        h = self.harness
        key = (turn.agent.id, turn.agent.generation)
        with h.cond:
            h.in_gate.add(key)
            h.bump()
            while not h.gate_open and not turn.cancelled.is_set():
                h.cond.wait(GATE_POLL_S)
            h.in_gate.discard(key)
            h.bump()
        return f"gated:{turn.task}"

    # -- what a telling leaf sent --

    @staticmethod
    def _content(turn: Turn) -> str:
        return f"hello from {turn.agent.name}"

    def _refused(self, turn: Turn, to: str, exc: BaseException) -> None:
        """A runner's send was refused: only as the mailbox rules say (the turn fails with it)."""
        h, me = self.harness, turn.agent
        with h.cond:
            if not isinstance(exc, RetinueError):
                if not isinstance(exc, asyncio.CancelledError):
                    h.problems.append(f"send from {me.path} raised {error_text(exc)}")
                return
            if to != HOST:
                return
            STATS[f"host_send_refused:{type(exc).__name__}"] += 1
            if isinstance(exc, NotPermitted) and me.depth == 1:
                h.problems.append(f"top-level {me.path} may not message the host: {exc}")
            if isinstance(exc, MailboxFull):
                h.host_full += 1
            if me.depth > 1 and not isinstance(exc, NotPermitted | MailboxFull):
                h.problems.append(f"{me.path} messaging the host got {exc!r}, not NotPermitted")

    def _told(self, turn: Turn, to: str, key: str | None, message: Message) -> None:
        """Book a message a runner sent (to its parent, or to the host's inbox)."""
        h, me = self.harness, turn.agent
        with h.cond:
            if to == HOST and me.depth > 1:
                h.problems.append(f"{me.path} (depth {me.depth}) messaged the host: {message}")
            original = None if key is None else h.agent_dedup.get((me.id, key))
            if original is not None:
                if message != original:
                    h.problems.append(
                        f"{me.path} re-sent dedup key {key!r}: got {message}, not {original}"
                    )
                return
            fields = (message.kind, message.sender, message.sender_id, message.recipient)
            if fields != ("message", me.path, me.id, to) or message.content != self._content(turn):
                h.problems.append(f"turn.send from {me.path} returned {message}")
            if message.id in h.agent_sent:
                h.problems.append(f"turn.send from {me.path} reused message id {message.id}")
            h.agent_sent[message.id] = message
            STATS["agent_messages"] += 1
            if to == HOST:
                STATS["host_inbox_sent"] += 1
            if key is not None:
                h.agent_dedup[(me.id, key)] = message

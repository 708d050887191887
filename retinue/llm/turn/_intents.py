"""The journal of a model turn's tool calls: intents before they run, calls found in doubt.

Before a step's tool calls run, their intents are stored (a
:class:`~retinue.protocol.records.ToolStep` in the transcript record, in the
commit that stores the assistant message asking for them: one commit for
the whole step); the commit that stores their results empties it. A call
whose intent is stored without a result when a later turn loads the
transcript was running when its turn stopped: it is **in doubt**, and what
happens to it depends on its effect class (:mod:`retinue.protocol.effects`):
a read or idempotent call runs again with the same idempotency key, an
unsafe one is reported to the model (or, with ``Profile(in_doubt="approve")``,
sent to a person). A call that needs approval runs as ``unsafe``: the
approval gate's park is the journal's ``waiting`` state, and the record of
an approved call running (once a separate "cut short" result) is its
``running`` intent.

Pure functions over the stored records: the session
(:mod:`retinue.llm.turn._session`) commits what they return.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import msgspec

from retinue.protocol.effects import (
    Effect,
    ToolCall,
    idempotency_key,
    in_doubt_action,
    in_doubt_result,
    not_run_result,
)
from retinue.protocol.messages import AgentInfo, ToolCallInDoubt
from retinue.protocol.records import JournaledCall, ToolStep, open_count

__all__ = [
    "closed",
    "denied_in_doubt",
    "doubtful_calls",
    "intents",
    "open_count",
    "settle",
    "started",
    "tool_call",
]

_replace = msgspec.structs.replace


def intents(
    agent_id: str,
    generation: int,
    step: int,
    calls: Sequence[Any],
    granted: Mapping[str, str],
    effect: Callable[[str], Effect],
    gated: Collection[str],
) -> ToolStep:
    """Return the journal of a new step: one intent per call (OpenAI-shaped ``calls``).

    ``granted`` maps offered names to granted ones, ``effect(offered name)``
    gives a tool's class, ``gated`` holds the ids of the calls that need
    approval (they run ``unsafe``); a step with any waits for its approvals
    (every call ``waiting``), else every call is ``running`` at once.
    """
    wait = bool(gated)
    entries = []
    for index, call in enumerate(calls):
        name = str(call["function"]["name"])
        entries.append(
            JournaledCall(
                call_id=str(call["id"]),
                index=index,
                tool=granted.get(name, name),
                effect="unsafe" if call["id"] in gated else effect(name),
                key=idempotency_key(agent_id, generation, step, index),
                state="waiting" if wait else "running",
            )
        )
    return ToolStep(generation=generation, step=step, calls=tuple(entries))


def closed(journal: ToolStep | None, generation: int) -> ToolStep:
    """The journal once its step's results are stored: no call, the step count kept."""
    if journal is None or journal.generation != generation:
        return ToolStep(generation=generation, step=0)
    return ToolStep(generation=generation, step=journal.step)


def tool_call(journal: ToolStep, call: JournaledCall, agent_id: str) -> ToolCall:
    """The :class:`ToolCall` a tool sees for one journaled call."""
    return ToolCall(
        idempotency_key=call.key,
        attempt=call.attempt,
        in_doubt=call.in_doubt,
        tool=call.tool,
        call_id=call.call_id,
        effect=call.effect,  # type: ignore[arg-type]
        agent_id=agent_id,
        generation=journal.generation,
        step=journal.step,
        index=call.index,
    )


def started(journal: ToolStep, denied: Mapping[str, str]) -> ToolStep:
    """The journal once a step's approvals are answered: each waiting call runs (a call in
    doubt a person let run again as its next attempt), but those ``denied`` (call id -> the
    result the model gets), which are done."""
    calls = []
    for call in journal.calls:
        if call.state == "waiting":
            result = denied.get(call.call_id)
            attempt = call.attempt + 1 if call.in_doubt else call.attempt
            call = (
                _replace(call, state="running", attempt=attempt)
                if result is None
                else _replace(call, state="done", result=result)
            )
        calls.append(call)
    return _replace(journal, calls=tuple(calls))


def doubtful_calls(journal: ToolStep | None, history: Sequence[Any]) -> list[Any]:
    """The chat's calls ``journal`` holds intents for: the last assistant message's calls
    that have no result (its step), in order; none when the two do not match (a journal
    of a step whose results were stored, or a transcript cut past it)."""
    if journal is None or not journal.calls:
        return []
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if message.get("role") == "tool":
            continue
        if message.get("role") != "assistant":
            return []
        answered = {m.get("tool_call_id") for m in history[index + 1 :]}
        calls = [c for c in message.get("tool_calls") or () if c.get("id") not in answered]
        ids = [str(c.get("id")) for c in calls]
        return calls if ids == [c.call_id for c in journal.calls] else []
    return []


def settle(
    journal: ToolStep, mode: str, agent: AgentInfo
) -> tuple[ToolStep, list[ToolCallInDoubt]]:
    """Act on a journal a new turn found open: return it as it now runs, and the events of
    its calls in doubt.

    A call that may have started is in doubt: a read or idempotent one runs
    again (``attempt`` + 1, same key), an unsafe one is reported (``done`` with
    :func:`~retinue.protocol.effects.in_doubt_result`) or, with ``mode``
    ``"approve"``, waits for a person. A call that never started (its step
    waited for approvals and the turn ended first) is ``done``, not run.
    """
    now = time.time()
    calls: list[JournaledCall] = []
    events: list[ToolCallInDoubt] = []
    for call in journal.calls:
        if call.state == "done":
            calls.append(call)
            continue
        if call.state == "waiting" and not call.in_doubt:
            calls.append(_replace(call, state="done", result=not_run_result(call.tool)))
            continue
        action = in_doubt_action(call.effect, mode)
        events.append(
            ToolCallInDoubt(
                agent_id=agent.id,
                path=agent.path,
                at=now,
                call_id=call.call_id,
                tool=call.tool,
                idempotency_key=call.key,
                effect=call.effect,
                action=action,
            )
        )
        if action == "rerun":
            call = _replace(call, state="running", attempt=call.attempt + 1, in_doubt=True)
        elif action == "reported":
            result = in_doubt_result(call.tool, call.key)
            call = _replace(call, state="done", in_doubt=True, result=result)
        else:
            call = _replace(call, state="waiting", in_doubt=True)
        calls.append(call)
    return _replace(journal, calls=tuple(calls)), events


def denied_in_doubt(call: JournaledCall, reason: str) -> str:
    """The result of a call in doubt a person chose not to run again."""
    data = json.loads(in_doubt_result(call.tool, call.key))
    data["error"] += f" A person chose not to run it again: {reason}"
    return json.dumps(data, ensure_ascii=False)

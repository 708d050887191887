"""retinue's side of the durable-steps benchmark: model turns whose steps are host tool calls.

:class:`RetinueSteps` opens a runtime (durability ``full``) with one model
profile on ``retinue/durable-steps``: an offline model served through the
``retinue/`` litellm provider (:mod:`retinue.llm.model._offline`), so every call goes
through litellm's own call path as ``retinue/scripted``'s do, with no network.
It calls the host ``@tool`` ``note`` once per answer until the chat holds the
task's number of results, then answers. The built-in ``retinue/scripted``
model never calls a host tool, hence this one (same provider, same path).

Each agent is one turn of ``steps`` tool steps; each step is what
:class:`~retinue.llm.turn._session.TurnSession` does today: the model's answer
(its tool call) committed with its usage (``LlmStep``), the tool run, its
result committed (``LlmStep``), the next model call. The clock ticks as the
tool starts, so the interval between two ticks is one durable step. The
step is journaled (:mod:`retinue.llm.turn._intents`): the call's intent (its
tool, class and idempotency key) is committed with the model's answer, before
the tool runs, and the result's commit empties the journal; no extra commit.

:class:`RetinueCommits` is the breakdown, no model: a Python runner doing
the same two ``LlmStep`` commits per step around the same tool, the intent
in the first and the result in the second (:func:`durable_step`), to show
what a journaled tool step costs without litellm. Its turns start as a model
turn's do (their stored state handed at the start, the input stored with the
first intent): the commits per step are a model turn's, with no extra, and so is
the transcript work of a step (the chat bounded, then encoded, with a
:class:`~retinue.protocol.transcript_memo.TranscriptMemo` per turn).
:class:`RawLoop` is the other half: the same offline model and tool in a
hand-written loop on ``litellm.acompletion``, nothing stored.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from retinue import Durability, Limits, Profile, Runtime, Turn
from retinue.actors.turns import TurnControl, control_of
from retinue.llm import LiteLLMRunner, tool
from retinue.llm.model import load_litellm, register_offline_model
from retinue.llm.tools import calling
from retinue.llm.turn._bridge import llm_load, llm_step
from retinue.llm.turn._intents import closed, intents, open_count, tool_call
from retinue.protocol.chat import stored_chat
from retinue.protocol.messages import Usage
from retinue.protocol.records import ToolStep
from retinue.protocol.transcript_memo import TranscriptMemo
from stress.bench.durable_common import StepClock, quantile

__all__ = ["MODEL", "RawLoop", "RetinueCommits", "RetinueSteps", "durable_step", "respond"]

_JSON = msgspec.json.Encoder()
"""The step's JSON, encoded as a model turn's toolbox encodes a tool's result (compact)."""

MODEL_NAME = "durable-steps"
MODEL = f"retinue/{MODEL_NAME}"
"""The offline model of the benchmark: one ``note`` call per answer, ``steps`` times."""

_TASK = re.compile(r"agent (\d+) steps (\d+)")
NOTE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "note",
        "description": "Take a note.",
        "parameters": {
            "type": "object",
            "properties": {"agent": {"type": "integer"}, "step": {"type": "integer"}},
            "required": ["agent", "step"],
        },
    },
}


def task(agent: int, steps: int) -> str:
    """The task that makes agent ``agent`` take ``steps`` tool steps."""
    return f"agent {agent} steps {steps}"


def _reply(messages: list[Any]) -> dict[str, Any]:
    """The next answer: a ``note`` call while the exchange has fewer results than asked."""
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    found = _TASK.search(str(messages[last_user].get("content")))
    agent, steps = (int(found[1]), int(found[2])) if found else (0, 0)
    done = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "tool")
    if done >= steps:
        return {"role": "assistant", "content": f"noted {done} times"}
    arguments = json.dumps({"agent": agent, "step": done})
    function = {"name": "note", "arguments": arguments}
    call = {"id": f"call_{done}", "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def respond(model: str, messages: list[Any], optional_params: Mapping[str, Any]) -> Any:
    """The offline model's answer as a litellm ``ModelResponse`` (a small, fixed usage)."""
    reply = _reply(messages)
    finish = "tool_calls" if reply.get("tool_calls") else "stop"
    return load_litellm().ModelResponse(
        model=model,
        choices=[{"index": 0, "finish_reason": finish, "message": reply}],
        usage={"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    )


class _Timings:
    """A timing sink of the runtime: every group commit's time, every command's kind."""

    def __init__(self) -> None:
        self.commits: list[float] = []
        self.steps = 0
        self._lock = threading.Lock()

    def observe_commit(self, seconds: float) -> None:
        with self._lock:
            self.commits.append(seconds)

    def observe_command(self, kind: str, seconds: float) -> None:
        if kind == "LlmStep":  # only the supervisor's thread counts them: no lock
            self.steps += 1

    def row(self) -> dict[str, Any]:
        with self._lock:
            commits, steps = list(self.commits), self.steps
        return {
            "commits": len(commits),
            "llm_step_commands": steps,
            "llm_steps_per_commit": round(steps / len(commits), 2) if commits else 0.0,
            "commit_p50_ms": round(quantile(commits, 0.5) * 1000, 3),
            "commit_p99_ms": round(quantile(commits, 0.99) * 1000, 3),
        }


def _limits(agents: int) -> Limits:
    return Limits(
        max_agents=agents * 4 + 16,
        max_tree_agents=8,
        max_active_turns=agents,
        max_concurrent_calls=agents,
        retain_closed_agents=agents * 4 + 16,
        event_queue_capacity=max(10_000, agents * 8),
        wait_max_s=3600.0,
    )


class _RuntimeSide:
    """What both retinue sides share: a runtime per level, agents spawned and awaited."""

    name = ""
    timeout_s = 1800.0

    def __init__(self) -> None:
        self.clock = StepClock()
        self._rt: Runtime | None = None
        self._timings = _Timings()
        self._detach: Any = None

    def _profile(self) -> Profile:
        raise NotImplementedError

    def open(self, folder: Path, agents: int, steps: int) -> None:
        """Open a runtime in ``folder`` (durability ``full``) for ``agents`` turns at once."""
        self._timings = _Timings()
        self._rt = Runtime.open(
            folder,
            profiles=[self._profile()],
            limits=_limits(agents),
            durability=Durability.FULL,
            map_size=1 << 30,
        )
        self._detach = self._rt._attach_timings(self._timings)

    def run_agents(self, first: int, count: int, steps: int, clock: StepClock) -> None:
        """Spawn ``count`` agents at once and await their completions."""
        rt = self._rt
        assert rt is not None
        self.clock = clock

        async def main() -> None:
            infos = await asyncio.gather(
                *(rt.spawn_async("agent", task(i, steps)) for i in range(first, first + count))
            )
            done = await asyncio.gather(
                *(rt.wait_async(info.id, timeout=self.timeout_s) for info in infos)
            )
            failed = [c for c in done if c.status != "completed"]
            if failed:
                raise RuntimeError(f"{len(failed)} agents did not complete: {failed[0]}")

        asyncio.run(main())

    def close(self) -> dict[str, Any]:
        """Shut the runtime down; return the commit figures of the level."""
        if self._detach is not None:
            self._detach()
        if self._rt is not None:
            self._rt.shutdown()
        self._rt = None
        return self._timings.row()


class RetinueSteps(_RuntimeSide):
    """Model turns on the offline model through litellm, a host ``@tool`` per step."""

    name = "retinue"

    def __init__(self) -> None:
        super().__init__()
        side = self

        @tool
        async def note(agent: int, step: int) -> str:
            """Take a note."""
            side.clock.tick(agent)
            return f"noted {agent}-{step}"

        self._runner = LiteLLMRunner(
            MODEL, host_tools={"note": note}, tools=["note"], max_tool_calls=100_000
        )

    def _profile(self) -> Profile:
        return Profile("agent", tools=["note"], runner=self._runner)

    def open(self, folder: Path, agents: int, steps: int) -> None:
        """Serve the offline model, then open the runtime."""
        register_offline_model(MODEL_NAME, respond)
        super().open(folder, agents, steps)

    def close(self) -> dict[str, Any]:
        """Shut the runtime down and stop serving the model."""
        try:
            return super().close()
        finally:
            register_offline_model(MODEL_NAME, None)


async def durable_step(
    turn: TurnControl,
    history: list[dict[str, Any]],
    agent: int,
    step: int,
    clock: StepClock,
    *,
    takes_input: bool = False,
    memo: TranscriptMemo | None = None,
) -> None:
    """One journaled tool step of a model turn, without the model: the two ``LlmStep`` commits.

    The assistant's call is committed with its usage and the call's intent
    (the journal: tool, class, idempotency key), the tool runs (``clock``
    ticks) with its :class:`~retinue.ToolCall` set, its result is committed
    with the journal emptied: what a model turn's step stores
    (:meth:`~retinue.llm.turn._session.TurnSession._run_tools`). The turn's
    first step (``takes_input``) stores its input with the intent, as a model
    turn's first save does. The chat is bounded and encoded as a model turn's
    step does it, ``memo`` keeping its sizes and records between steps (one per
    turn; none: a new one, nothing kept).
    """
    memo = TranscriptMemo() if memo is None else memo
    call_id = f"call_{step}"
    arguments = _JSON.encode({"agent": agent, "step": step}).decode()
    history.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "note", "arguments": arguments},
                }
            ],
        }
    )
    usage = Usage(prompt_tokens=20, completion_tokens=5)
    me = turn.agent
    journal = intents(
        me.id, me.generation, step + 1, history[-1]["tool_calls"], {}, lambda _: "read", ()
    )
    raw = _stored(turn, history, memo, journal)
    await llm_step(turn, usage, raw, takes_input=takes_input, open_calls=open_count(journal))
    with calling(tool_call(journal, journal.calls[0], me.id)):
        clock.tick(agent)
    result = _JSON.encode({"result": f"noted {agent}-{step}"}).decode()  # as a ToolBox does
    history.append({"role": "tool", "tool_call_id": call_id, "name": "note", "content": result})
    done = closed(journal, me.generation)
    await llm_step(turn, Usage(), _stored(turn, history, memo, done), open_calls=0)


def _stored(
    turn: TurnControl, history: list[dict[str, Any]], memo: TranscriptMemo, journal: ToolStep
) -> bytes:
    """The chat as a model turn's step stores it: bounded, then encoded with the journal
    (:meth:`~retinue.llm.turn._session.TurnSession._step`: the same call, the same memo)."""
    me = turn.agent
    max_bytes = turn.limits.transcript_max_bytes
    history[:], _, _, raw = stored_chat(
        me.id, history, max_bytes, 0, generation=me.generation, journal=journal, memo=memo
    )
    return raw


class _CommitsRunner:
    """The breakdown's runner: :func:`durable_step` ``steps`` times, started as a model turn is.

    It has a ``host_tools`` mapping (no tool in it), so the runtime takes it for
    a model runner (:func:`~retinue.actors.turns.is_model_runner`) and hands
    its turns their stored state as they start (``Turn.llm_state``): no
    ``LlmLoad`` round trip, as a :class:`~retinue.llm.LiteLLMRunner` turn. Its
    first step stores the turn's input with the first intent, as a model turn's
    first save does: two commits per step, nothing more.
    """

    def __init__(self, side: RetinueCommits) -> None:
        self.host_tools: dict[str, Any] = {}
        self._side = side

    async def __call__(self, face: Turn) -> str:
        turn = control_of(face)  # the LLM layer's commands go through the turn's control
        found = _TASK.search(turn.task)
        assert found is not None
        agent, steps = int(found[1]), int(found[2])
        await llm_load(turn)
        history: list[dict[str, Any]] = [{"role": "user", "content": turn.task}]
        memo = TranscriptMemo()  # as a model turn's session keeps one
        for step in range(steps):
            clock = self._side.clock
            await durable_step(turn, history, agent, step, clock, takes_input=step == 0, memo=memo)
        return f"noted {steps} times"


class RetinueCommits(_RuntimeSide):
    """The breakdown: :func:`durable_step` ``steps`` times per turn, no model call."""

    name = "retinue_commits_only"

    def _profile(self) -> Profile:
        return Profile("agent", runner=_CommitsRunner(self))


class RawLoop:
    """The same model and tool in a hand-written ``litellm.acompletion`` loop, nothing stored."""

    name = "raw_litellm_loop"

    def __init__(self) -> None:
        self._loop: asyncio.Runner | None = None

    def open(self, folder: Path, agents: int, steps: int) -> None:
        """Serve the offline model; start the event loop every round runs on."""
        register_offline_model(MODEL_NAME, respond)
        self._loop = asyncio.Runner()

    def run_agents(self, first: int, count: int, steps: int, clock: StepClock) -> None:
        """Run ``count`` tool loops at once on one event loop."""
        litellm = load_litellm()

        async def one(agent: int) -> None:
            messages: list[dict[str, Any]] = [{"role": "user", "content": task(agent, steps)}]
            while True:
                reply = await litellm.acompletion(
                    model=MODEL, messages=messages, tools=[NOTE_SCHEMA]
                )
                message = reply.choices[0].message
                if not message.tool_calls:
                    return
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    args = json.loads(call.function.arguments)
                    clock.tick(agent)
                    content = json.dumps({"result": f"noted {args['agent']}-{args['step']}"})
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})

        async def main() -> None:
            await asyncio.gather(*(one(i) for i in range(first, first + count)))

        assert self._loop is not None
        self._loop.run(main())

    def close(self) -> dict[str, Any]:
        """Close the loop; stop serving the model."""
        if self._loop is not None:
            self._loop.close()
        register_offline_model(MODEL_NAME, None)
        return {}

"""One turn of a model agent: the tool loop, from the stored conversation to the final answer.

A turn sends the profile's instructions as the system message, then the
stored conversation, then the turn's input (its task and unread messages,
children's completions rendered as ``[subagent:<path>] ...``). It loops over
the model's tool calls (run through the turn's toolbox) until the model
answers without one; that answer is the turn's output. Every step is
recorded through the supervisor (usage and transcript in one committed
transition); the first step also stores the turn's input, so nothing the
turn was handed is lost if it fails later (see ``LlmStep.takes_input``).

Supervision: a restarted turn (``reason == "restart"``) opens with a marker
saying the previous attempt failed and why; calls of tools the profile names
in ``approve`` pass the approval gate (:mod:`retinue.llm.turn._approval_gate`); a
turn that carries on after its approvals were answered in a new process
(``reason == "approval"``) first runs the step it parked on; with a budget
set, every model call is admitted first (:func:`~retinue.llm.model._budgets.admit_call`);
under provider limits each attempt is then admitted by the runtime's gate
(:class:`~retinue.llm.model.LimitedCalls`): a call a budget refuses never waits.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from retinue.errors import CassetteMiss, ModelCallFailed, ResultContractError, ToolCallLimitExceeded
from retinue.llm._context import TurnContext
from retinue.llm.chat import (
    ChatMessage,
    assistant_message,
    bound_at,
    decode_transcript,
    encode_transcript,
    for_model,
    render_message,
    repair_dangling,
    stored_calls,
    timed_call,
    tool_outcome,
    turn_input,
    unanswered_calls,
)
from retinue.llm.mcp import mcp_tool_defs
from retinue.llm.model import LimitedCalls, admit_call, check_budgets, complete, usage_of
from retinue.llm.tools import ToolBox
from retinue.llm.turn._approval_gate import (
    CUT_SHORT_RESULT,
    ask_approvals,
    denied_result,
    gated,
    granted_names,
    without_held,
)
from retinue.llm.turn._bridge import llm_load, llm_step
from retinue.llm.turn._settings import RunnerSettings
from retinue.llm.turn._taped import Taped, TapedTool
from retinue.protocol.messages import Usage
from retinue.protocol.records import ModelCallRecord
from retinue.protocol.results import encode_result, parse_result, result_instruction
from retinue.protocol.supervision import APPROVAL_REASON

__all__ = ["REPAIR_PROMPT", "TurnSession"]

REPAIR_PROMPT = (
    "Your answer does not follow the structured result contract: {error}. "
    "Answer again with only the corrected JSON object."
)
"""The one repair request sent after a structured answer that does not parse."""


class TurnSession:
    """One turn of a :class:`~retinue.llm._runner.LiteLLMRunner`: its chat and its usage.

    ``runner`` is read for its settings only (:class:`RunnerSettings`).
    """

    def __init__(self, runner: RunnerSettings, turn: TurnContext, litellm: ModuleType) -> None:
        """Prepare the turn (nothing is read or called yet)."""
        self.runner = runner
        self.turn = turn
        self.litellm = litellm
        self.limits = turn.limits
        profile = turn.profile
        self.tools = runner.tools if runner.tools is not None else profile.tools
        self.structured = (runner.result_format or profile.result_format) == "structured"
        self.history: list[ChatMessage] = []
        self.cut = 0
        self.input_stored = False  # the first save stores the turn's input with its step
        self.task_at: int | None = None
        self.agent_usage = Usage()
        self.tree_usage = Usage()
        self.calls_made = 0
        self.repaired = False
        self.parked_calls: list[Any] = []  # the step a turn carrying on after a reopen parked on
        self.call_times: list[ModelCallRecord] = []  # stored with the transcript (its timeline)
        calls = runner.calls
        self.limited = LimitedCalls.of(turn, litellm, calls.model, calls.kwargs)

    def _system(self) -> list[ChatMessage]:
        text = self.turn.instructions or ""
        if self.structured:
            text = f"{text}\n\n{result_instruction()}" if text else result_instruction()
        return [{"role": "system", "content": text}] if text else []

    async def run(self) -> str:
        """Run the turn's tool loop; return the model's final answer (the turn's output).

        Raises:
            ModelCallFailed, TokenBudgetExceeded, ToolCallLimitExceeded,
            ResultContractError: as :meth:`LiteLLMRunner.__call__` says.
        """
        await self._load()
        toolbox = await self._toolbox()
        schemas = toolbox.schemas()
        if self.turn.reason == APPROVAL_REASON:
            await self._carry_on(toolbox)
        while True:
            admitted = await admit_call(self.turn, self.agent_usage, self.tree_usage)
            assistant, usage = await self._call_model(schemas)
            self.history.append(assistant)
            calls = assistant.get("tool_calls") or []
            if calls:
                await self._run_tools(toolbox, usage, assistant, admitted)
                continue
            await self._save(usage, ends_call=admitted)
            self._check_spent()
            answer = await self._answer(assistant["content"] or "")
            if answer is not None:
                return answer

    async def _call_model(self, schemas: list[dict[str, Any]]) -> tuple[ChatMessage, Usage]:
        """Make one model call (reported on the turn's watch); return its answer and usage.

        The answer is the chat message the turn keeps, every text of it made
        storable here, where it arrives (:func:`~retinue.llm.chat._arrival.assistant_message`).

        Raises:
            ModelCallFailed: the call failed for good, or the answer has no choices.
        """
        calls = self.runner.calls
        messages = self._system() + for_model(self.history)
        traced = self.turn.watch.span is not None  # the chat span reads the request
        request = dict(calls.kwargs, messages=messages, stream=calls.stream) if traced else None
        tape = Taped(self.runner.cassette, self.turn.agent.path, calls, messages, schemas)
        recorded = tape.answer()  # CassetteMiss: replaying, and this call was not recorded
        watch = self.turn.watch.model_call(calls.model, request)
        started = time.time()
        if recorded is not None:
            message, usage = recorded
            watch.finished(usage)
            self.call_times.append(timed_call(self.turn.agent, calls.model, started, usage))
            del self.call_times[: -self.limits.transcript_max_calls]
            return message, usage
        calls = tape.live(calls)
        try:
            with watch.current():  # litellm's own OTel callback sees it as its parent
                response = await complete(
                    self.litellm,
                    calls,
                    messages,
                    schemas,
                    self.limits.max_concurrent_calls,
                    watch,
                    self.limited,
                )
            message = assistant_message(_first_message(response, self.runner.model))
        except BaseException as exc:
            watch.failed(exc)
            raise
        usage = usage_of(self.litellm, calls, response)
        tape.record(message, usage)
        watch.finished(usage, response)
        self.call_times.append(timed_call(self.turn.agent, calls.model, started, usage))
        del self.call_times[: -self.limits.transcript_max_calls]  # the newest are kept
        return message, usage

    async def _load(self) -> None:
        """Read the stored conversation and usage; open the chat with this turn's input.

        A turn carrying on after a reopen keeps the step it parked on (its
        calls have no results yet); its input follows their results.
        """
        turn = self.turn
        raw, self.agent_usage, self.tree_usage = await llm_load(turn)
        history, self.cut = decode_transcript(raw)
        self.call_times = stored_calls(raw)
        if turn.reason == APPROVAL_REASON:
            self.parked_calls = unanswered_calls(history)
            self.history = history
            self.input_stored = True  # its input joins the chat after the parked step
            return
        self.history = repair_dangling(history)
        self.task_at = len(self.history)  # the transcript cut always keeps this turn's task
        text = turn_input(turn.task, turn.reason, turn.messages, turn.agent.last_error)
        self.history.append({"role": "user", "content": text})

    async def _carry_on(self, toolbox: ToolBox) -> None:
        """Run the step a turn parked on before its process stopped; then add its input."""
        calls = self.parked_calls
        if calls:
            results = await self._call_tools(toolbox, calls, resume=True)
            self._answer_calls(calls, results)
        if self.turn.messages:
            self.task_at = len(self.history)
            text = "\n\n".join(render_message(m) for m in self.turn.messages)
            self.history.append({"role": "user", "content": text})
        self.input_stored = False  # the next save stores the input (or the results)
        await self._save(Usage())

    async def _toolbox(self) -> ToolBox:
        runner = self.runner
        owner = self.turn.profile.name
        return runner.toolbox_builder(
            self.turn,
            tools=self.tools,
            workspace=runner.workspace,
            host_tools=runner.host_tools,
            tool_timeout_s=runner.tool_timeout_s,
            mcp_tools=await mcp_tool_defs(runner.mcp, self.tools, owner),
        )

    async def _run_tools(
        self, toolbox: ToolBox, usage: Usage, assistant: ChatMessage, admitted: bool
    ) -> None:
        """Run the model's tool calls (at once) and record their results.

        Raises:
            ToolCallLimitExceeded: the turn would pass ``max_tool_calls``.
        """
        calls = assistant.get("tool_calls") or []
        limit = self.runner.max_tool_calls
        over = self.calls_made + len(calls) > limit
        if over:
            self._answer_calls(calls, [_not_run(limit)] * len(calls))
        await self._save(usage, ends_call=admitted)
        self._check_spent()
        if over:
            raise ToolCallLimitExceeded(
                f"the model asked for more than max_tool_calls={limit} tool calls in one turn",
                limit=limit,
                value=self.calls_made + len(calls),
                path=self.turn.agent.path,
            )
        self.calls_made += len(calls)
        results = await self._call_tools(toolbox, calls)
        self._answer_calls(calls, results)
        await self._save(Usage())

    async def _call_tools(
        self, toolbox: ToolBox, calls: Sequence[Any], *, resume: bool = False
    ) -> list[str]:
        """Run ``calls`` at once, after the approval gate; return their results in order.

        The calls that need approval wait for it first (the turn parks); a
        denied one is not run. An approved one is recorded as cut short
        before it runs, so a crash meanwhile never runs it twice (that record
        is this step's: an earlier step's call of the same id keeps its own).
        """
        approve = self.turn.profile.approve
        names = granted_names(toolbox) if approve else {}
        asked = gated(approve, calls, names) if approve else []
        answers = await ask_approvals(self.turn, asked, names=names, resume=resume)
        approved = [c["id"] for c in asked if answers[c["id"]].status == "approved"]
        if approved:
            held = [
                {"role": "tool", "tool_call_id": i, "content": CUT_SHORT_RESULT} for i in approved
            ]
            self.history.extend(held)
            await self._save(Usage())
            self.history = without_held(self.history, approved)

        async def one(call: Any) -> str:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            kind = toolbox.kind(name) if isinstance(toolbox, ToolBox) else "function"
            watch = self.turn.watch.tool_call(call["id"], name, arguments, kind)
            answer = answers.get(call["id"])
            if answer is not None and answer.status != "approved":
                result = denied_result(answer)
                watch.finished(f"denied: {answer.reason or answer.status}")
                return result
            tool = TapedTool(self.runner, self.turn.agent.path, name, arguments)
            try:
                recorded = tool.answer()  # replaying host tools: the recorded result
            except CassetteMiss as exc:  # not recorded: the turn fails, loudly
                watch.finished(str(exc))
                raise
            try:
                with watch.current():  # what the tool spawns nests under its span
                    result, error = recorded or await _run_tool(toolbox, name, arguments)
                if recorded is None:
                    tool.record(result, error)
            except BaseException:
                watch.cancelled()
                raise
            watch.finished(error, result)
            return result

        return list(await asyncio.gather(*(one(c) for c in calls)))

    async def _answer(self, text: str) -> str | None:
        """The turn's output for the model's final ``text``; None after asking for a repair.

        Raises:
            ResultContractError: a structured answer broke the contract again.
        """
        if not self.structured:
            return text
        try:
            result = parse_result(text)
        except ResultContractError as exc:
            if self.repaired:
                raise
            self.repaired = True
            self.history.append({"role": "user", "content": REPAIR_PROMPT.format(error=exc)})
            await self._save(Usage())
            return None
        return encode_result(result, self.limits.output_max_bytes)

    def _answer_calls(self, calls: Sequence[Any], results: Sequence[str]) -> None:
        for call, content in zip(calls, results, strict=True):
            self.history.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": call["function"]["name"],
                    "content": content,
                }
            )

    def _check_spent(self) -> None:
        """After a call is recorded: the turn fails once a budget is crossed."""
        check_budgets(
            self.limits, self.turn.agent.path, self.agent_usage, self.tree_usage, before=False
        )

    async def _save(self, usage: Usage, *, ends_call: bool = False) -> None:
        """Store the chat (bounded) and add ``usage``; the first save also takes the input.

        ``ends_call``: ``usage`` is an admitted call's (its reservation ends).
        """
        self.history, cut, self.task_at = bound_at(
            self.history, self.limits.transcript_max_bytes, self.task_at
        )
        self.cut += cut
        agent = self.turn.agent
        raw = encode_transcript(agent.id, self.history, self.cut, self.call_times, agent.generation)
        takes_input, self.input_stored = not self.input_stored, True
        self.agent_usage, self.tree_usage = await llm_step(
            self.turn, usage, raw, takes_input=takes_input, ends_call=ends_call
        )


def _first_message(response: Any, model: str) -> Any:
    """The first choice's message of a response.

    Raises:
        ModelCallFailed: the response has no choices.
    """
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise ModelCallFailed(f"{model}: the model returned no choices", provider=model)
    return choices[0].message


async def _run_tool(toolbox: ToolBox, name: str, arguments: str) -> tuple[str, str | None]:
    """Run one tool call; return its result and its error (None: it succeeded).

    A toolbox of the host's own (a ``toolbox=`` builder's) only has ``call``:
    its error is read from the result (``{"error": ...}``), and both are made
    storable here, where they arrive (a :class:`ToolBox` does it itself).
    """
    if isinstance(toolbox, ToolBox):
        return await toolbox.run(name, arguments)  # made storable there
    result: str = await toolbox.call(name, arguments)
    try:
        data = json.loads(result) if result.startswith("{") else None
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    return tool_outcome(result, None if error is None else str(error))


def _not_run(limit: int) -> str:
    return json.dumps({"error": f"not run: the turn reached max_tool_calls={limit}"})

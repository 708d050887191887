"""One turn of a model agent: the tool loop, from the stored conversation to the final answer.

A turn sends the profile's instructions as the system message, then the
stored conversation, then the turn's input (its task and unread messages,
children's completions rendered as ``[subagent:<path>] ...``). It loops over
the model's tool calls (run through the turn's toolbox) until the model
answers without one; that answer is the turn's output. Every step is
recorded through the supervisor (usage and transcript in one committed
transition); the first step also stores the turn's input, so nothing the
turn was handed is lost if it fails later (see ``LlmStep.takes_input``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from retinue.errors import ModelCallFailed, ResultContractError, ToolCallLimitExceeded
from retinue.llm.bridge import llm_load, llm_step
from retinue.llm.budgets import check_token_budgets
from retinue.llm.calls import complete, usage_of
from retinue.llm.context import TurnContext
from retinue.llm.conversation import (
    ChatMessage,
    bound_at,
    decode_transcript,
    encode_transcript,
    repair_dangling,
    turn_input,
)
from retinue.llm.mcp.grants import mcp_tool_defs
from retinue.llm.toolbox import ToolBox
from retinue.protocol.messages import Usage
from retinue.protocol.results import encode_result, parse_result, result_instruction

if TYPE_CHECKING:
    from retinue.llm.runner import LiteLLMRunner

__all__ = ["REPAIR_PROMPT", "TurnSession"]

REPAIR_PROMPT = (
    "Your answer does not follow the structured result contract: {error}. "
    "Answer again with only the corrected JSON object."
)
"""The one repair request sent after a structured answer that does not parse."""


class TurnSession:
    """One turn of a :class:`~retinue.llm.runner.LiteLLMRunner`: its chat and its usage."""

    def __init__(self, runner: LiteLLMRunner, turn: TurnContext, litellm: ModuleType) -> None:
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
        while True:
            check_token_budgets(
                self.limits, self.turn.agent.path, self.agent_usage, self.tree_usage, before=True
            )
            response = await complete(
                self.litellm,
                self.runner.calls,
                self._system() + self.history,
                schemas,
                self.limits.max_concurrent_calls,
            )
            message = _first_message(response, self.runner.model)
            assistant = _assistant(message)
            self.history.append(assistant)
            calls = assistant.get("tool_calls") or []
            if calls:
                await self._run_tools(toolbox, response, assistant)
                continue
            await self._save(usage_of(self.litellm, self.runner.calls, response))
            self._check_spent()
            answer = await self._answer(message.content or "")
            if answer is not None:
                return answer

    async def _load(self) -> None:
        """Read the stored conversation and usage; open the chat with this turn's input."""
        turn = self.turn
        raw, self.agent_usage, self.tree_usage = await llm_load(turn)
        history, self.cut = decode_transcript(raw)
        self.history = repair_dangling(history)
        self.task_at = len(self.history)  # the transcript cut always keeps this turn's task
        self.history.append(
            {"role": "user", "content": turn_input(turn.task, turn.reason, turn.messages)}
        )

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

    async def _run_tools(self, toolbox: ToolBox, response: Any, assistant: ChatMessage) -> None:
        """Run the model's tool calls (at once) and record their results.

        Raises:
            ToolCallLimitExceeded: the turn would pass ``max_tool_calls``.
        """
        calls = assistant.get("tool_calls") or []
        limit = self.runner.max_tool_calls
        over = self.calls_made + len(calls) > limit
        if over:
            self._answer_calls(assistant, [_not_run(limit)] * len(calls))
        await self._save(usage_of(self.litellm, self.runner.calls, response))
        self._check_spent()
        if over:
            raise ToolCallLimitExceeded(
                f"the model asked for more than max_tool_calls={limit} tool calls in one turn",
                limit=limit,
                value=self.calls_made + len(calls),
                path=self.turn.agent.path,
            )
        self.calls_made += len(calls)
        results = await asyncio.gather(
            *(toolbox.call(c["function"]["name"], c["function"]["arguments"]) for c in calls)
        )
        self._answer_calls(assistant, results)
        await self._save(Usage())

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

    def _answer_calls(self, assistant: ChatMessage, results: Sequence[str]) -> None:
        for call, content in zip(assistant.get("tool_calls") or [], results, strict=True):
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
        check_token_budgets(
            self.limits, self.turn.agent.path, self.agent_usage, self.tree_usage, before=False
        )

    async def _save(self, usage: Usage) -> None:
        """Store the chat (bounded) and add ``usage``; the first save also takes the input."""
        self.history, cut, self.task_at = bound_at(
            self.history, self.limits.transcript_max_bytes, self.task_at
        )
        self.cut += cut
        raw = encode_transcript(self.turn.agent.id, self.history, self.cut)
        takes_input, self.input_stored = not self.input_stored, True
        self.agent_usage, self.tree_usage = await llm_step(
            self.turn, usage, raw, takes_input=takes_input
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


def _assistant(message: Any) -> ChatMessage:
    """The chat message of the model's answer, its tool calls in the OpenAI shape."""
    assistant: ChatMessage = {"role": "assistant", "content": message.content}
    calls = list(getattr(message, "tool_calls", None) or [])
    if calls:
        assistant["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.function.name,
                    "arguments": call.function.arguments or "{}",
                },
            }
            for call in calls
        ]
    return assistant


def _not_run(limit: int) -> str:
    return json.dumps({"error": f"not run: the turn reached max_tool_calls={limit}"})

"""``LiteLLMRunner``: an async turn runner that drives a model through litellm.

A turn sends the profile's instructions as the system message, then the
stored conversation, then the turn's input (its task and unread messages,
children's completions rendered as ``[subagent:<path>] ...``). It loops over
the model's tool calls (run through the turn's :mod:`toolbox
<retinue.llm.toolbox>`) until the model answers without one; that answer is
the turn's output. Every step is recorded through the supervisor (usage and
transcript in one committed transition), so a follow-up continues the
conversation and an agent restored after a crash resumes with its history.

Bounds: ``max_tool_calls`` per turn, ``request_timeout_s`` per call (enforced
here with ``asyncio.wait_for``), ``retries`` with jittered exponential backoff
(``Retry-After`` honoured), ``Limits.tokens_per_agent`` /
``Limits.tokens_per_tree`` and ``Limits.max_concurrent_calls`` per model.
An interrupt cancels the turn's task: the in-flight call is abandoned and its
late answer never read.
"""

from __future__ import annotations

import asyncio
import json
import random
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from retinue.errors import (
    ConfigurationError,
    ModelCallFailed,
    ResultContractError,
    TokenBudgetExceeded,
    ToolCallLimitExceeded,
)
from retinue.llm import toolbox as toolbox_module
from retinue.llm.bridge import llm_load, llm_step
from retinue.llm.conversation import (
    ChatMessage,
    bound_at,
    decode_transcript,
    encode_transcript,
    repair_dangling,
    turn_input,
)
from retinue.llm.mcp.grants import mcp_tool_defs
from retinue.llm.provider import SCRIPTED_PROVIDER, load_litellm
from retinue.llm.retry import backoff_delay, classify
from retinue.protocol.limits import Limits
from retinue.protocol.messages import Usage
from retinue.protocol.results import encode_result, parse_result, result_instruction

__all__ = ["REPAIR_PROMPT", "LiteLLMRunner", "model_runner_factory"]

REPAIR_PROMPT = (
    "Your answer does not follow the structured result contract: {error}. "
    "Answer again with only the corrected JSON object."
)
"""The one repair request sent after a structured answer that does not parse."""

_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]]
_semaphores = weakref.WeakKeyDictionary()


def _semaphore(model: str, size: int) -> asyncio.Semaphore:
    """Return the per-model call bound of the running event loop."""
    per_loop = _semaphores.setdefault(asyncio.get_running_loop(), {})
    semaphore = per_loop.get(model)
    if semaphore is None:
        semaphore = per_loop[model] = asyncio.Semaphore(size)
    return semaphore


def _positive(name: str, value: Any, *, integer: bool, zero: bool = False) -> None:
    kind = int if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kind)
        or value < 0
        or (value == 0 and not zero)
    ):
        want = "a non-negative integer" if zero else "a positive number"
        raise ConfigurationError(f"LiteLLMRunner {name} must be {want}, not {value!r}")


class LiteLLMRunner:
    """An async runner that answers a turn with a model called through ``litellm.acompletion``.

    ``tools`` and ``result_format`` default to the agent's profile fields;
    ``workspace`` is the folder built-in tools are confined to (set by
    ``Runtime.open(workspace=...)`` for runners it creates); ``host_tools``
    maps names to host functions offered as tools. ``retry_base_s`` and
    ``retry_max_s`` shape the backoff; ``tool_timeout_s`` bounds each file or
    host tool call. Every other keyword goes to
    ``litellm.acompletion`` as it is (litellm's own client retries are off
    unless ``max_retries`` is given).

    Raises:
        ConfigurationError: an empty model, a negative count, a non-positive
            timeout or an unknown result format.
    """

    holds_input = True
    """A turn's input is stored with its first model step; one that ends before gives it back."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        max_tool_calls: int = 50,
        request_timeout_s: float = 120,
        retries: int = 4,
        tools: str | Sequence[str] | None = None,
        result_format: str | None = None,
        workspace: str | Path | None = None,
        host_tools: Mapping[str, Callable[..., Any]] | None = None,
        retry_base_s: float = 0.5,
        retry_max_s: float = 60.0,
        tool_timeout_s: float = toolbox_module.DEFAULT_TOOL_TIMEOUT_S,
        mcp: Any = None,
        **litellm_kwargs: Any,
    ) -> None:
        """Check and keep the settings; nothing is imported or called yet."""
        if not isinstance(model, str) or not model:
            raise ConfigurationError("LiteLLMRunner model must be a non-empty string")
        _positive("max_tool_calls", max_tool_calls, integer=True, zero=True)
        _positive("retries", retries, integer=True, zero=True)
        _positive("request_timeout_s", request_timeout_s, integer=False)
        _positive("retry_base_s", retry_base_s, integer=False)
        _positive("retry_max_s", retry_max_s, integer=False)
        toolbox_module.check_timeout("LiteLLMRunner tool_timeout_s", tool_timeout_s)
        if result_format not in (None, "structured"):
            raise ConfigurationError(
                f"LiteLLMRunner result_format must be 'structured' or None, not {result_format!r}"
            )
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.temperature = temperature
        self.max_tool_calls = max_tool_calls
        self.request_timeout_s = float(request_timeout_s)
        self.retries = retries
        self.tools = tools
        self.result_format = result_format
        self.workspace = None if workspace is None else Path(workspace)
        self.host_tools: dict[str, Callable[..., Any]] = dict(host_tools or {})
        self.retry_base_s = float(retry_base_s)
        self.retry_max_s = float(retry_max_s)
        self.tool_timeout_s = float(tool_timeout_s)  # bounds each file and host tool call
        self.litellm_kwargs = dict(litellm_kwargs)
        self.mcp = mcp  # the runtime's McpManager (retinue.llm.mcp), set by Runtime.open
        self._rng = random.Random()

    def __repr__(self) -> str:
        """Show the model (never the key)."""
        return f"LiteLLMRunner(model={self.model!r})"

    def _call_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model}
        if not self.model.startswith(SCRIPTED_PROVIDER + "/"):
            # retinue owns retries and the deadline (asyncio.wait_for): none in the client.
            kwargs["max_retries"] = 0
        if self.api_base is not None:
            kwargs["api_base"] = self.api_base
        if self.api_key is not None:
            kwargs["api_key"] = self.api_key
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        kwargs.update(self.litellm_kwargs)
        return kwargs

    async def __call__(self, turn: Any) -> str:
        """Run one turn; return the model's final answer.

        Raises:
            ModelCallFailed: a call failed for good (one line: provider, status, message).
            TokenBudgetExceeded: ``tokens_per_agent`` or ``tokens_per_tree`` is spent.
            ToolCallLimitExceeded: the model asked for more than ``max_tool_calls`` calls.
            ResultContractError: a structured answer still broke the contract after
                one repair request.
            TurnInterrupted: the turn was interrupted.
        """
        return await _Session(self, turn, load_litellm()).run()


class _Session:
    """One turn of a :class:`LiteLLMRunner`."""

    def __init__(self, runner: LiteLLMRunner, turn: Any, litellm: ModuleType) -> None:
        self.runner = runner
        self.turn = turn
        self.litellm = litellm
        self.limits: Limits = turn.limits
        profile = getattr(turn, "profile", None)
        self.tools = runner.tools if runner.tools is not None else getattr(profile, "tools", None)
        self.structured = (
            runner.result_format or getattr(profile, "result_format", None)
        ) == "structured"
        self.history: list[ChatMessage] = []
        self.cut = 0
        self.input_stored = False  # the first save stores the turn's input with its step
        self.task_at: int | None = None

    def _system(self) -> list[ChatMessage]:
        text = str(getattr(self.turn, "instructions", "") or "")
        if self.structured:
            text = f"{text}\n\n{result_instruction()}" if text else result_instruction()
        return [{"role": "system", "content": text}] if text else []

    async def run(self) -> str:
        turn, runner = self.turn, self.runner
        raw, agent_usage, tree_usage = await llm_load(turn)
        history, self.cut = decode_transcript(raw)
        self.history = repair_dangling(history)
        self.task_at = len(self.history)  # the transcript cut always keeps this turn's task
        self.history.append(
            {"role": "user", "content": turn_input(turn.task, turn.reason, turn.messages)}
        )
        owner = getattr(getattr(turn, "profile", None), "name", "") or ""
        toolbox = toolbox_module.build_toolbox(
            turn,
            tools=self.tools,
            workspace=runner.workspace,
            host_tools=runner.host_tools,
            tool_timeout_s=runner.tool_timeout_s,
            mcp_tools=await mcp_tool_defs(runner.mcp, self.tools, owner),
        )
        schemas = toolbox.schemas()
        calls_made = 0
        repaired = False
        while True:
            self._check_budgets(agent_usage, tree_usage, before=True)
            response = await self._complete(schemas)
            choices = getattr(response, "choices", None) or []
            if not choices:
                raise ModelCallFailed(
                    f"{runner.model}: the model returned no choices", provider=runner.model
                )
            message = choices[0].message
            calls = list(getattr(message, "tool_calls", None) or [])
            assistant: ChatMessage = {"role": "assistant", "content": message.content}
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
            self.history.append(assistant)
            over = calls and calls_made + len(calls) > runner.max_tool_calls
            if over:
                self._answer_calls(assistant, [_not_run(runner.max_tool_calls)] * len(calls))
            agent_usage, tree_usage = await self._save(self._usage(response))
            self._check_budgets(agent_usage, tree_usage, before=False)
            if over:
                raise ToolCallLimitExceeded(
                    f"the model asked for more than max_tool_calls={runner.max_tool_calls} "
                    "tool calls in one turn",
                    limit=runner.max_tool_calls,
                    value=calls_made + len(calls),
                    path=self.turn.agent.path,
                )
            if calls:
                calls_made += len(calls)
                results = await asyncio.gather(
                    *(
                        toolbox.call(c["function"]["name"], c["function"]["arguments"])
                        for c in assistant["tool_calls"]
                    )
                )
                self._answer_calls(assistant, results)
                agent_usage, tree_usage = await self._save(Usage())
                continue
            text = message.content or ""
            if not self.structured:
                return text
            try:
                result = parse_result(text)
            except ResultContractError as exc:
                if repaired:
                    raise
                repaired = True
                self.history.append({"role": "user", "content": REPAIR_PROMPT.format(error=exc)})
                agent_usage, tree_usage = await self._save(Usage())
                continue
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

    async def _save(self, usage: Usage) -> tuple[Usage, Usage]:
        self.history, cut, self.task_at = bound_at(
            self.history, self.limits.transcript_max_bytes, self.task_at
        )
        self.cut += cut
        raw = encode_transcript(self.turn.agent.id, self.history, self.cut)
        takes_input, self.input_stored = not self.input_stored, True
        return await llm_step(self.turn, usage, raw, takes_input=takes_input)

    def _check_budgets(self, agent: Usage, tree: Usage, *, before: bool) -> None:
        path = self.turn.agent.path
        checks = (
            ("tokens_per_agent", self.limits.tokens_per_agent, agent.total_tokens, path),
            ("tokens_per_tree", self.limits.tokens_per_tree, tree.total_tokens, None),
        )
        for budget, limit, used, who in checks:
            if limit is None or (used < limit if before else used <= limit):
                continue
            owner = who or f"the tree of {path}"
            raise TokenBudgetExceeded(
                f"{budget} budget of {limit} tokens is spent: {owner} has used {used}; "
                f"raise Limits.{budget} to continue",
                budget=budget,
                limit=limit,
                used=used,
                path=who,
            )

    def _usage(self, response: Any) -> Usage:
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = 0.0
        if not self.runner.model.startswith(SCRIPTED_PROVIDER + "/"):
            hidden = getattr(response, "_hidden_params", None) or {}
            value = hidden.get("response_cost")
            if value is None:
                try:
                    value = self.litellm.completion_cost(completion_response=response)
                except Exception:  # a model litellm does not price costs 0.0
                    value = 0.0
            try:
                cost = max(0.0, float(value or 0.0))
            except (TypeError, ValueError):
                cost = 0.0
        return Usage(prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost)

    async def _complete(self, schemas: list[dict[str, Any]]) -> Any:
        runner = self.runner
        kwargs = runner._call_kwargs()
        kwargs["messages"] = self._system() + self.history
        if schemas:
            kwargs["tools"] = schemas
        semaphore = _semaphore(runner.model, self.limits.max_concurrent_calls)
        attempt = 0
        while True:
            attempt += 1
            try:
                async with semaphore:
                    return await asyncio.wait_for(
                        self.litellm.acompletion(**kwargs), runner.request_timeout_s
                    )
            except Exception as exc:  # CancelledError (an interrupt) is not an Exception
                failure = classify(exc, runner.model, runner.request_timeout_s)
            if not failure.retryable or attempt > runner.retries:
                raise ModelCallFailed(
                    failure.line(attempt), provider=failure.provider, status=failure.status
                )
            await asyncio.sleep(
                backoff_delay(
                    attempt,
                    runner.retry_base_s,
                    runner.retry_max_s,
                    failure.retry_after,
                    runner._rng,
                )
            )


def _not_run(limit: int) -> str:
    return json.dumps({"error": f"not run: the turn reached max_tool_calls={limit}"})


def model_runner_factory(workspace: Path | None, mcp: Any = None) -> Callable[[Any, Any], Any]:
    """Return the factory the runtime uses for profiles that name (or inherit) a model.

    ``factory(profile, model_profile)`` builds a :class:`LiteLLMRunner` for
    ``model_profile.model`` with its ``model_settings`` as keyword arguments,
    ``workspace`` (unless the settings name one) and the runtime's MCP
    servers ``mcp`` (an :class:`~retinue.llm.mcp.McpManager` or None).

    Raises:
        ConfigurationError: (from the factory) a setting LiteLLMRunner refuses.
    """

    def factory(profile: Any, model_profile: Any) -> Any:
        settings = dict(model_profile.model_settings)
        if workspace is not None:
            settings.setdefault("workspace", workspace)
        if mcp is not None:
            settings["mcp"] = mcp
        try:
            return LiteLLMRunner(model_profile.model, **settings)
        except TypeError as exc:
            raise ConfigurationError(
                f"profile {profile.name!r}: bad model_settings of {model_profile.name!r}: {exc}"
            ) from None

    return factory

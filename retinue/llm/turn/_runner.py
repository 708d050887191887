"""``LiteLLMRunner``: an async turn runner that drives a model through litellm.

The runner holds one agent kind's model settings; each turn is a
:class:`~retinue.llm.turn._session.TurnSession` (the tool loop), each model call
goes through :mod:`retinue.llm.model._calls` (deadline, retries, cost) and each
tool call through the turn's toolbox (:func:`~retinue.llm.tools._toolbox.build_toolbox`,
or the ``toolbox`` builder given). litellm is imported on a thread of its own
when a runtime with a model runner opens, or else when a model is first
called; a turn waits for it without blocking the event loop (see
:mod:`retinue.llm.model._provider`).

Bounds: ``max_tool_calls`` per turn, ``request_timeout_s`` per call,
``retries`` with jittered exponential backoff (``Retry-After`` honoured),
``tool_timeout_s`` per tool call, ``Limits.tokens_per_agent`` /
``Limits.tokens_per_tree`` and ``Limits.max_concurrent_calls`` per model.
An interrupt cancels the turn's task: the in-flight call is abandoned and its
late answer never read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from retinue.actors.turns import Turn, control_of
from retinue.errors import ConfigurationError
from retinue.llm.cassette import Cassette
from retinue.llm.model import (
    SCRIPTED_PROVIDER,
    CallSettings,
    finish_logging_at_close,
    load_litellm_async,
)
from retinue.llm.model._provider import loaded_litellm
from retinue.llm.tools import ToolBoxBuilder, ToolBoxProtocol, adapting
from retinue.llm.tools import _toolbox as toolbox_module
from retinue.llm.turn._offered import OfferedSchemas
from retinue.llm.turn._session import REPAIR_PROMPT, TurnSession

__all__ = ["REPAIR_PROMPT", "LiteLLMRunner", "ToolBoxBuilder", "model_runner_factory"]


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

    Its settings are what each turn's :class:`~retinue.llm.turn._session.TurnSession`
    reads (the :class:`~retinue.llm.turn._settings.RunnerSettings` protocol).

    ``tools`` and ``result_format`` default to the agent's profile fields;
    ``workspace`` is the folder built-in tools are confined to (set by
    ``Runtime.open(workspace=...)`` for runners it creates); ``host_tools``
    maps names to host functions offered as tools. ``retry_base_s`` and
    ``retry_max_s`` shape the backoff; ``tool_timeout_s`` bounds each file or
    host tool call; ``toolbox`` builds each turn's toolbox (default
    :func:`~retinue.llm.tools._toolbox.build_toolbox`; what it returns, a
    ``ToolBox`` or any object with ``schemas()`` and ``await call(name,
    arguments)``, is adapted to
    :class:`~retinue.llm.tools._protocol.ToolBoxProtocol`). ``stream=True`` streams each
    answer (its text is published as ``ModelDelta`` events as it arrives; the
    assembled answer is what is stored: see :mod:`retinue.llm.model._streaming`).
    ``cassette`` records every model call and host tool result of the run to a
    file, or answers them from it (``mode``: ``"record"``, ``"replay"`` (the
    default: never a live call; a request not recorded fails the turn with
    ``CassetteMiss``) or ``"auto"``); ``redact`` is a list of regular
    expressions whose matches never reach the file (API keys never do);
    ``replay_tools=False`` runs host tools even when replaying
    (:mod:`retinue.llm.cassette`; a :class:`~retinue.llm.cassette.Cassette` given
    as ``cassette`` is used as it is, shared by every runner it is given to).
    Every other keyword goes to ``litellm.acompletion`` as it is (litellm's own
    client retries are off unless ``max_retries`` is given; retinue's own models,
    ``retinue/...``, are free and say so with litellm's per-call prices,
    ``input_cost_per_token`` and ``output_cost_per_token`` at 0, unless given).

    Raises:
        ConfigurationError: an empty model, a negative count, a non-positive
            timeout or an unknown result format.
    """

    model_runner = True
    """A model runner: its turns read their stored transcript and usage as they start, so
    the scheduler hands them over with the turn
    (:func:`~retinue.actors.turns.is_model_runner`)."""

    holds_input = True
    """A turn's input is stored with its first model step (its transcript holds it from then
    on); a turn that ends before, and does not complete, gives it back, as any turn does."""

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
        toolbox: ToolBoxBuilder | None = None,
        stream: bool = False,
        cassette: str | Path | Cassette | None = None,
        mode: str = "replay",
        redact: Sequence[str] = (),
        replay_tools: bool = True,
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
        if not isinstance(stream, bool):
            raise ConfigurationError(f"LiteLLMRunner stream must be True or False, not {stream!r}")
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
        # Whatever the builder returns is adapted to the ToolBoxProtocol here, once.
        self.toolbox_builder: Callable[..., ToolBoxProtocol] = adapting(toolbox)
        self.offered = OfferedSchemas()  # the default builder's schemas, kept between turns
        self.stream = stream
        self.cassette = (
            cassette
            if cassette is None or isinstance(cassette, Cassette)
            else Cassette(
                cassette, mode, redact=redact, secrets=[api_key], replay_tools=replay_tools
            )
        )
        self.calls = CallSettings(
            model=model,
            kwargs=self._call_kwargs(),
            request_timeout_s=self.request_timeout_s,
            retries=retries,
            retry_base_s=self.retry_base_s,
            retry_max_s=self.retry_max_s,
            stream=stream,
        )

    def __repr__(self) -> str:
        """Show the model (never the key)."""
        return f"LiteLLMRunner(model={self.model!r})"

    def _call_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model}
        if self.model.startswith(SCRIPTED_PROVIDER + "/"):
            # retinue's own models are free; saying so with each call (litellm's
            # per-call custom pricing) spares litellm its failed cost-map lookups
            kwargs.update(input_cost_per_token=0.0, output_cost_per_token=0.0)
        else:
            # retinue owns retries and the deadline (its own, per attempt): none in the client.
            kwargs["max_retries"] = 0
        if self.api_base is not None:
            kwargs["api_base"] = self.api_base
        if self.api_key is not None:
            kwargs["api_key"] = self.api_key
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        kwargs.update(self.litellm_kwargs)
        return kwargs

    async def __call__(self, turn: Turn) -> str:
        """Run one turn; return the model's final answer.

        Raises:
            ModelCallFailed: a call failed for good (one line: provider, status, message).
            TokenBudgetExceeded: ``tokens_per_agent`` or ``tokens_per_tree`` is spent.
            ToolCallLimitExceeded: the model asked for more than ``max_tool_calls`` calls.
            ResultContractError: a structured answer still broke the contract after
                one repair request.
            TurnInterrupted: the turn was interrupted.
        """
        # imported off the loop, if not yet (once it is: no coroutine made to say so)
        litellm = loaded_litellm() or await load_litellm_async()
        finish_logging_at_close()  # the runtime's loop lets litellm's callbacks finish
        return await TurnSession(self, control_of(turn), litellm).run()


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

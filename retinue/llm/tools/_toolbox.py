"""The tools one LLM turn offers its model: the interface between the runner and the tools.

- ``build_toolbox(turn, *, tools, workspace, host_tools) -> ToolBox`` is called at most once per
  turn, on the runtime's event loop: before the first model call, or, for a turn that offers only
  coordinator and host tools and whose runner kept that offer's schemas from an earlier turn
  (:mod:`retinue.llm.turn._offered`), at its first tool call. ``turn`` is the runner's
  :class:`~retinue.actors.turns._turn.Turn`, or the turn's control a runner's ``toolbox=`` builder
  is given (its async twins and ``turn.profile``); ``tools`` is the agent's tools setting: a preset
  ``"read"`` / ``"modify"`` / ``"none"``, exact tool names, or None (no ordinary tools;
  ``Runtime.open`` has already resolved an inheriting profile's ``tools`` into names); ``workspace``
  is the folder the built-in tools are confined to; ``host_tools`` the host-registered functions (a
  mapping name -> function, or a list of functions / :func:`~retinue.llm.tool`\\ s).
- ``ToolBox.schemas()`` returns the OpenAI ``tools`` parameter (a list of
  ``{"type": "function", "function": {"name", "description", "parameters"}}``):
  the coordinator tools (all seven when the agent may spawn, else
  ``send_message`` alone: the same set on every call of an agent), then
  the granted built-in tools, then the granted host tools.
- ``await ToolBox.call(name, arguments)`` runs one tool call (``arguments``
  is the raw JSON text the model produced) and returns the JSON text the model
  sees. It NEVER raises (except ``asyncio.CancelledError`` when the turn is
  cancelled): invalid JSON, a missing, unknown or mistyped argument (named by
  field), an unknown tool, a refused operation (caps, permissions, unknown
  agents, paths out of the workspace) and any tool exception come back as
  ``{"error": "..."}`` with no traceback (a ``CancelledError`` the tool raises
  while nobody cancelled the call too: cancellation is not interruption),
  and so does a call past its
  ``timeout_s`` (``tool_timeout_s`` for file and host tools: the call is
  cancelled, or abandoned on its pool thread). Results are bounded at
  ``max_result_bytes`` and made storable as they arrive: a lone surrogate in
  a result or an error becomes its escape (:mod:`retinue.protocol.arrival`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from retinue.actors import Profile
from retinue.actors.turns import Turn, control_of
from retinue.errors import ConfigurationError, RetinueError, TurnInterrupted
from retinue.llm.tools._arguments import ToolDef, ToolError, decode_arguments
from retinue.llm.tools._bash import DEFAULT_BASH_TIMEOUT_S
from retinue.llm.tools._builtins import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TOOL_TIMEOUT_S,
    builtin_tools,
)
from retinue.llm.tools._call import calling
from retinue.llm.tools._coordinator import coordinator_tools
from retinue.llm.tools._host import check_timeout, host_tool_defs
from retinue.llm.tools._workspace import Workspace
from retinue.protocol.arrival import tool_outcome
from retinue.protocol.effects import Effect, ToolCall
from retinue.protocol.text import storable_text, truncate_utf8
from retinue.protocol.tools import BUILTIN_TOOLS, is_mcp_name, resolve_tools, runner_tools

if TYPE_CHECKING:  # the turn's control, as the layer above it types it
    from retinue.llm.turn._context import TurnContext

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_TOOL_TIMEOUT_S",
    "ToolBox",
    "ToolBoxBuilder",
    "build_toolbox",
    "check_timeout",
    "error_result",
]

DEFAULT_MAX_RESULT_BYTES = 65_536
"""Largest tool result handed back to the model, in bytes of UTF-8 JSON."""

_ENCODER = msgspec.json.Encoder()
_log = logging.getLogger("retinue.mcp")
_CANCEL_GRACE_S = 1.0
"""Seconds a timed-out tool call is given to end once cancelled, before it is left behind."""


def error_result(message: str) -> str:
    """Return the tool result the model sees for a failed call: ``{"error": message}``."""
    return json.dumps({"error": message}, ensure_ascii=False)


class ToolBox:
    """The tools of one turn: their schemas and a call that never raises."""

    def __init__(
        self, tools: Sequence[ToolDef], *, max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    ) -> None:
        """Hold ``tools`` (unique names); results are cut at ``max_result_bytes``."""
        self._tools = {tool.name: tool for tool in tools}
        self._max = max_result_bytes
        # the entries' JSON, joined once: each turn's schemas() decodes it (a fresh copy)
        self._schemas = b"[" + b",".join([tool.schema_json() for tool in tools]) + b"]"

    @property
    def names(self) -> list[str]:
        """The tool names offered, in schema order."""
        return list(self._tools)

    @property
    def granted(self) -> dict[str, str]:
        """Each offered name -> the name profiles grant the tool by (``time__x`` ->
        ``time.x`` for an MCP tool; a built-in, host or coordinator tool's own name)."""
        return {name: tool.granted_name for name, tool in self._tools.items()}

    def effect(self, name: str) -> Effect:
        """Return a tool's effect class as declared (``unsafe`` for a name it does not offer)."""
        tool = self._tools.get(name) if isinstance(name, str) else None
        return "unsafe" if tool is None else tool.effect

    def kind(self, name: str) -> str:
        """Return a tool's ``gen_ai.tool.type``: ``extension`` (an MCP server's), ``function``."""
        tool = self._tools.get(name) if isinstance(name, str) else None
        return "function" if tool is None else tool.kind

    @property
    def json(self) -> bytes:
        """The OpenAI ``tools`` parameter for this turn as JSON (what :meth:`schemas` decodes)."""
        return self._schemas

    def schemas(self) -> list[dict[str, Any]]:
        """Return the OpenAI ``tools`` parameter for this turn (may be empty)."""
        copy: list[dict[str, Any]] = msgspec.json.decode(self._schemas)
        return copy  # the caller may edit it

    async def call(self, name: str, arguments: str, call: ToolCall | None = None) -> str:
        """Run tool ``name`` with the raw JSON ``arguments``; return the result as JSON text.

        Never raises, except ``asyncio.CancelledError`` and ``TurnInterrupted``
        (the turn is cancelled or interrupted): every failure, any other
        ``BaseException`` a tool raises included (``SystemExit``,
        ``KeyboardInterrupt``, a ``CancelledError`` while the call's task was
        not cancelled), is returned as ``{"error": "..."}``. ``call`` is the
        journaled call this run is (its idempotency key, attempt, in doubt):
        the tool reads it (:mod:`retinue.llm.tools._call`); without one, a tool
        that asks gets a fresh key.
        """
        text, _ = await self.run(name, arguments, call)
        return text

    async def run(
        self, name: str, arguments: str, call: ToolCall | None = None
    ) -> tuple[str, str | None]:
        """Like :meth:`call`; return ``(result, error)``: ``error`` is None if the call
        succeeded, else the message of the ``{"error": ...}`` result.

        Both are made storable here, where a tool's answer arrives
        (:func:`~retinue.protocol.arrival.tool_outcome`: a lone surrogate is escaped).
        """
        with calling(call):
            result, error = await self._outcome(name, arguments)
        return tool_outcome(result, error)

    async def _outcome(self, name: str, arguments: str) -> tuple[str, str | None]:
        """Run one call (see :meth:`run`); its texts as the tool gave them."""
        try:
            tool = self._tools.get(name) if isinstance(name, str) else None
            if tool is None:
                offered = ", ".join(self._tools) or "none"
                return _failed(f"unknown tool {name!r}; the tools you have: {offered}")
            raw: object = arguments
            if isinstance(raw, Mapping):  # a provider that decoded the JSON already
                raw = _ENCODER.encode(dict(raw))
            if not isinstance(raw, str | bytes):
                return _failed(f"invalid arguments for {name}: send a JSON object")
            text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
            try:
                args = decode_arguments(tool.decoder, name, text)
            except ToolError as exc:
                hint = f"; {tool.hint}" if tool.hint else ""
                return _failed(f"{exc}{hint}")
            value = await _run(tool, args)
            return self._encode(name, value)
        except asyncio.CancelledError as exc:
            if _cancelled():
                raise  # the turn is cancelled: not the tool's failure
            return _raised(name, exc)  # the tool's own: cancellation is not interruption
        except (GeneratorExit, TurnInterrupted):
            raise  # the turn is interrupted: not the tool's failure
        except (ToolError, RetinueError) as exc:
            return _failed(str(exc) or type(exc).__name__)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt too: never escapes
            return _raised(name, exc)

    def _encode(self, name: str, value: Any) -> tuple[str, str | None]:
        if not isinstance(value, dict | msgspec.Struct):
            value = {"result": value}
        try:
            text = _ENCODER.encode(value).decode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (half an emoji): escaped as it arrives
            try:
                text = storable_text(json.dumps(msgspec.to_builtins(value), ensure_ascii=False))
            except (TypeError, ValueError) as exc:
                return _failed(f"{name} returned a value that is not JSON: {exc}")
        except (TypeError, ValueError, UnicodeDecodeError) as exc:
            return _failed(f"{name} returned a value that is not JSON: {exc}")
        if len(text.encode("utf-8")) <= self._max:
            return text, _error_of(value)
        cut, _ = truncate_utf8(text, self._max - 200)
        note = f"the result was over {self._max} bytes"
        return json.dumps(
            {"result": cut, "truncated": True, "note": note}, ensure_ascii=False
        ), _error_of(value)


def _cancelled() -> bool:
    """Whether the running task was asked to cancel (the turn's interrupt, a deadline): a
    ``CancelledError`` it raises is then the cancellation's, not its tool's failure."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _raised(name: str, exc: BaseException) -> tuple[str, str]:
    """The ``(result, error)`` of a call whose tool raised ``exc``."""
    detail = str(exc)
    return _failed(f"{name} failed: {type(exc).__name__}" + (f": {detail}" if detail else ""))


def _failed(message: str) -> tuple[str, str]:
    """The ``(result, error)`` of a failed call."""
    return error_result(message), message


def _error_of(value: Any) -> str | None:
    """The error a tool reported in its own result (``{"error": "..."}``), if it did."""
    if isinstance(value, dict) and "error" in value and value["error"] is not None:
        return str(value["error"])
    return None


ToolBoxBuilder = Callable[..., ToolBox]
"""``builder(turn, *, tools, workspace, host_tools, tool_timeout_s, mcp_tools) -> ToolBox``
(:func:`build_toolbox` by default; a runner adapts what a builder of the host's returns
to :class:`~retinue.llm.tools._protocol.ToolBoxProtocol`)."""


class _TimedOut(ToolError):
    """A tool call ran past its ``timeout_s``."""


async def _guarded(call: Awaitable[Any]) -> tuple[bool, Any]:
    """Await ``call``; return ``(True, value)`` or ``(False, exception)``, any exception.

    A separate task must never raise ``SystemExit``: asyncio would re-raise it
    from the event loop itself.
    """
    try:
        return True, await call
    except (asyncio.CancelledError, GeneratorExit, TurnInterrupted):
        raise
    except BaseException as exc:
        return False, exc


async def _run(tool: ToolDef, args: Any) -> Any:
    """Run ``tool``'s handler, bounded by its ``timeout_s`` when it has one.

    Past the bound the call is cancelled (a sync call on the tool pool is
    abandoned and counted there) and waited for at most ``_CANCEL_GRACE_S``:
    a tool that ignores the cancellation cannot hold the turn.

    Raises:
        _TimedOut: the call ran past ``timeout_s``.
    """
    if tool.timeout_s is None:
        return await tool.handler(args)
    task = asyncio.ensure_future(_guarded(tool.handler(args)))
    try:
        done, _ = await asyncio.wait({task}, timeout=tool.timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        # Let the cancellation land (a pool call is then counted as abandoned),
        # but never wait long for a tool that ignores it.
        await asyncio.wait({task}, timeout=_CANCEL_GRACE_S)
        raise _TimedOut(f"tool {tool.name} timed out after {tool.timeout_s:g} s")
    ok, value = task.result()
    if not ok:
        raise value
    return value


def _granted(profile: Profile, owner: str, tools: str | Sequence[str] | None) -> Sequence[str]:
    """Return the tool names ``tools`` grants, within the profile's ceiling.

    A runtime's model runner had its own tools checked at open; the check
    here holds for whoever else calls :func:`build_toolbox` (the same rule,
    :func:`~retinue.protocol.tools.runner_tools`).
    """
    ceiling = resolve_tools(profile.tools, owner=owner)
    if ceiling is None or tools is profile.tools:
        return resolve_tools(tools, owner=owner) or ()
    return runner_tools(owner, tools, ceiling)


def build_toolbox(
    turn: Turn | TurnContext,
    *,
    tools: str | Sequence[str] | None = None,
    workspace: str | os.PathLike[str] | Workspace | None = None,
    host_tools: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]] | None = None,
    descriptions: Mapping[str, str] | None = None,
    spawn_wait_s: float | None = None,
    bash_timeout_s: float = DEFAULT_BASH_TIMEOUT_S,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    bash_env: Mapping[str, str] | None = None,
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    mcp_tools: Sequence[ToolDef] = (),
) -> ToolBox:
    """Return the toolbox of one turn (see the module docstring for the contract).

    The spawn tools' ``agent`` enum is ``turn.profile.subagents``; when that
    is empty or the agent is at ``depth_cap`` it may spawn nothing and is
    offered ``send_message`` alone of the coordinator tools.
    ``descriptions`` gives each spawnable profile a one-line description for
    the model. A synchronous spawn waits up to ``spawn_wait_s`` (default:
    ``turn.limits.wait_max_s``). ``bash_timeout_s`` is bash's default timeout;
    ``max_output_bytes`` bounds one file read or command output,
    ``max_result_bytes`` any result. ``tool_timeout_s`` bounds each call of a
    file tool and of a host tool that sets no ``timeout_s`` of its own.
    ``mcp_tools`` are the granted MCP servers' tools (from
    :func:`retinue.llm.mcp.mcp_tool_defs`), offered last. ``turn``: a Turn or its control.

    Raises:
        ConfigurationError: ``tools`` is not a valid spec; it goes beyond
            ``turn.profile.tools`` (the capability ceiling, when the profile
            sets one); it names a tool that is neither built in nor among
            ``host_tools``; it grants built-in tools with no ``workspace``; or
            a host tool is invalid; ``tool_timeout_s`` is not a positive number.
    """
    check_timeout("tool_timeout_s", tool_timeout_s)
    turn = control_of(turn) if isinstance(turn, Turn) else turn  # the tools use the control
    profile = turn.profile
    owner = profile.name
    names = _granted(profile, owner, tools)
    hosts = host_tool_defs(host_tools)
    unknown = [n for n in names if n not in BUILTIN_TOOLS and n not in hosts and not is_mcp_name(n)]
    if unknown:
        raise ConfigurationError(
            f"profile {owner!r}: tools {unknown} are neither "
            "built in nor registered; register host tools with the runner (tools=[...])"
        )
    granted = frozenset(names)
    offered: list[ToolDef] = []
    limits = turn.limits
    subagents = tuple(profile.subagents)
    offered += coordinator_tools(
        turn,
        allowed=subagents,
        can_spawn=bool(subagents) and limits.depth_allowed(turn.agent.depth + 1),
        fanout_cap=limits.fanout_cap,
        spawn_wait_s=limits.wait_max_s if spawn_wait_s is None else spawn_wait_s,
        wait_default_s=limits.wait_default_s,
        descriptions=descriptions,
    )
    builtins = granted & set(BUILTIN_TOOLS)
    if builtins:
        if workspace is None:
            raise ConfigurationError(
                f"profile {owner!r} has built-in tools ({', '.join(sorted(builtins))}) "
                "but no workspace folder was given"
            )
        confined = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        offered += builtin_tools(
            confined,
            frozenset(builtins),
            bash_timeout_s=bash_timeout_s,
            max_output_bytes=max_output_bytes,
            bash_env=bash_env,
            tool_timeout_s=tool_timeout_s,
        )
    offered += [hosts[n].definition(tool_timeout_s) for n in names if n in hosts]
    offered += _unclashed(offered, mcp_tools)
    return ToolBox(offered, max_result_bytes=max_result_bytes)


def _unclashed(offered: Sequence[ToolDef], mcp_tools: Sequence[ToolDef]) -> Sequence[ToolDef]:
    """Return the ``mcp_tools`` whose offered names no tool in ``offered`` has already.

    An MCP tool granted by its server's pattern may be listed under a name a
    host tool has (``a.b`` and the host tool ``a__b``): it is left out, with
    a warning, and the turn goes on with the other tools. (Exact grants that
    clash are refused at open.)
    """
    taken = {tool.name for tool in offered}
    clash = [tool for tool in mcp_tools if tool.name in taken]
    for tool in clash:
        _log.warning(
            "MCP tool %r is not offered: a model would see it as %r, a name another tool has",
            tool.granted_name,
            tool.name,
        )
    return [tool for tool in mcp_tools if tool.name not in taken]

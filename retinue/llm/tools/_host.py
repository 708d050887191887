"""Host tools: the host's own Python functions (sync or async), offered to a model as tools.

Register a function with :func:`tool` (or pass the plain function; it is
wrapped the same way). The arguments schema comes from the type hints, so
the JSON the model sends is decoded and checked before the function runs::

    from retinue.llm import tool

    @tool
    async def lookup_user(email: str, include_orders: bool = False) -> dict[str, object]:
        \"\"\"Find a customer by e-mail.

        Args:
            email: the customer's e-mail address.
        \"\"\"
        ...

A function that takes one parameter annotated with a ``msgspec.Struct`` gets
that struct, whose fields are the arguments. A parameter annotated
``retinue.ToolCall`` (``call: ToolCall``) is no argument of the model's: it is
handed the call being run (:class:`~retinue.protocol.effects.ToolCall`: its
``idempotency_key``, the same in every run of one call, its ``attempt`` and
whether it was found ``in_doubt`` after a crash), so the function (or the
service it calls) can make a second run of one call change nothing.
``@tool(effect=...)`` declares what a second run may do: ``"read"``,
``"idempotent"`` or ``"unsafe"`` (the default; see :mod:`retinue.protocol.effects`).
Parameter descriptions come from ``Annotated[..., msgspec.Meta(description=...)]``
or the docstring's ``Args:`` section; the tool's description is the docstring's
first paragraph.

A tool is *available* once registered with the runner
(``LiteLLMRunner(tools=[lookup_user])`` or ``build_toolbox(host_tools=...)``)
and *granted* to the agents whose profile names it in ``tools``
(``Profile("support", tools=["read_file", "lookup_user"])``): capability
ceilings treat host tools like built-in ones. A sync function runs on a
thread of the tool pool (:mod:`retinue.llm.tools._pool`), so it never stalls the
event loop. Each call is bounded by ``@tool(timeout_s=...)``, else by the
runner's ``tool_timeout_s`` (120 s): past it an async call is cancelled, a sync
one abandoned (it keeps its pool thread until it returns, counted in
``ToolPool.abandoned``), and the model gets ``{"error": "tool <name> timed out
after N s"}``. Whatever it returns is sent to the
model as JSON (a ``str`` as ``{"result": "..."}``); a
:class:`~retinue.llm.tools._arguments.ToolError` it raises is shown to the model as
its message, any other exception as its type and message (no traceback).
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, overload

import msgspec

from retinue.errors import ConfigurationError
from retinue.llm.tools._arguments import ToolDef
from retinue.llm.tools._call import call_or_fresh
from retinue.llm.tools._pool import tool_pool
from retinue.protocol.effects import Effect, ToolCall, check_effect
from retinue.protocol.tools import BUILTIN_TOOLS, COORDINATOR_TOOLS, PRESETS, TOOL_NAME_PATTERN

__all__ = ["HostTool", "check_timeout", "host_tool_defs", "tool"]

_NAME_RE = re.compile(TOOL_NAME_PATTERN.strip("^$"))
_ARG_LINE_RE = re.compile(r"^\s+\*{0,2}(\w+)(?:\s*\([^)]*\))?\s*:\s*(.+)$")


def _docstring_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """Return the first paragraph of ``fn``'s docstring and its ``Args:`` descriptions."""
    doc = inspect.getdoc(fn) or ""
    summary = doc.split("\n\n", 1)[0].strip().replace("\n", " ")
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in doc.splitlines():
        if line.strip() in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if not in_args:
            continue
        if line and not line[0].isspace():
            break  # the next section
        match = _ARG_LINE_RE.match(line)
        if match and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = match[1]
            params[current] = match[2].strip()
        elif current is not None and line.strip():
            params[current] += " " + line.strip()
    return summary, params


def _has_description(hint: Any) -> bool:
    if typing.get_origin(hint) is not Annotated:
        return False
    return any(isinstance(m, msgspec.Meta) and m.description for m in hint.__metadata__)


def check_timeout(what: str, value: object) -> None:
    """Check that a tool timeout is a positive, finite number of seconds.

    Raises:
        ConfigurationError: it is not.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(f"{what} must be a positive number of seconds, not {value!r}")


@dataclass(frozen=True)
class HostTool:
    """A host function registered as a tool: its name, description and argument struct.

    Build one with :func:`tool`; calling it calls the function. ``timeout_s``
    bounds each call (None: the runner's ``tool_timeout_s``); ``effect`` is its
    effect class; ``call_param`` names the parameter handed the running
    :class:`~retinue.protocol.effects.ToolCall` (None: it takes none).
    """

    name: str
    description: str
    args: type[msgspec.Struct]
    fn: Callable[..., Any]
    takes_struct: bool
    timeout_s: float | None = None
    effect: Effect = "unsafe"
    call_param: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (so a decorated function stays usable)."""
        return self.fn(*args, **kwargs)

    async def invoke(self, args: msgspec.Struct) -> Any:
        """Run the function with decoded arguments: awaited if async, else on a pool thread.

        A function with a ``call_param`` is handed the running tool call too.
        """
        extra = {} if self.call_param is None else {self.call_param: call_or_fresh(self.name)}
        if self.takes_struct:
            call = functools.partial(self.fn, args, **extra)
        else:
            kwargs = {name: getattr(args, name) for name in args.__struct_fields__}
            call = functools.partial(self.fn, **kwargs, **extra)
        if inspect.iscoroutinefunction(self.fn):
            return await call()
        result = await tool_pool().run(call)
        if inspect.isawaitable(result):
            return await result
        return result

    def definition(self, default_timeout_s: float | None = None) -> ToolDef:
        """Return the tool as the toolbox holds it, bounded by ``timeout_s`` or the default."""
        timeout = self.timeout_s if self.timeout_s is not None else default_timeout_s
        return ToolDef(
            self.name,
            self.description,
            self.args,
            self.invoke,
            timeout_s=timeout,
            effect=self.effect,
        )


def _is_call_hint(hint: Any) -> bool:
    """Whether a parameter's type hint asks for the running tool call (``ToolCall``, or
    ``ToolCall | None``)."""
    return hint is ToolCall or ToolCall in typing.get_args(hint)


def _checked_name(fn: Callable[..., Any], name: str | None) -> str:
    """Return the tool's name, checked against the rule and the built-in names."""
    if not callable(fn):
        raise ConfigurationError(f"a host tool must be a function, not {type(fn).__name__}")
    tool_name = name if name is not None else getattr(fn, "__name__", "")
    if not isinstance(tool_name, str) or _NAME_RE.fullmatch(tool_name) is None:
        raise ConfigurationError(
            f"host tool name {tool_name!r} must match {TOOL_NAME_PATTERN}; pass name=..."
        )
    if tool_name in COORDINATOR_TOOLS or tool_name in BUILTIN_TOOLS or tool_name in PRESETS:
        raise ConfigurationError(
            f"host tool name {tool_name!r} is taken by a built-in tool or preset; pass name=..."
        )
    return tool_name


def _arguments(
    tool_name: str,
    params: list[inspect.Parameter],
    hints: dict[str, Any],
    param_docs: dict[str, str],
) -> type[msgspec.Struct]:
    """The argument struct of a function's named parameters (their hints and descriptions).

    Raises:
        ConfigurationError: ``*args``, ``**kwargs``, a positional-only parameter or one
            without a type hint.
    """
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigurationError(
                f"host tool {tool_name!r}: parameter {param.name!r} must be a plain "
                "named parameter (no *args, **kwargs or positional-only)"
            )
        if param.name not in hints:
            raise ConfigurationError(
                f"host tool {tool_name!r}: parameter {param.name!r} needs a type hint"
            )
        hint = hints[param.name]
        if param.name in param_docs and not _has_description(hint):
            hint = Annotated[hint, msgspec.Meta(description=param_docs[param.name])]
        if param.default is param.empty:
            fields.append((param.name, hint))
        else:
            fields.append((param.name, hint, param.default))
    return msgspec.defstruct(
        f"{tool_name}_arguments",
        fields,
        kw_only=True,
        frozen=True,
        forbid_unknown_fields=True,
    )


def _build(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    timeout_s: float | None = None,
    effect: str | None = None,
) -> HostTool:
    label = f"host tool {name or getattr(fn, '__name__', '?')!r}"
    if timeout_s is not None:
        check_timeout(f"{label}: timeout_s", timeout_s)
    declared = None if effect is None else check_effect(label, effect)
    if isinstance(fn, HostTool):
        if timeout_s is None:
            timeout_s = fn.timeout_s
        if declared is None:
            declared = fn.effect
        if (
            name in (None, fn.name)
            and description is None
            and timeout_s == fn.timeout_s
            and declared == fn.effect
        ):
            return fn
        description = fn.description if description is None else description
        fn = fn.fn
    tool_name = _checked_name(fn, name)
    summary, param_docs = _docstring_parts(fn)
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise ConfigurationError(
            f"host tool {tool_name!r}: cannot read its signature: {exc}"
        ) from None
    params = list(signature.parameters.values())
    call_param = next((p.name for p in params if _is_call_hint(hints.get(p.name))), None)
    params = [p for p in params if p.name != call_param]
    takes_struct = (
        len(params) == 1
        and isinstance(hints.get(params[0].name), type)
        and issubclass(hints[params[0].name], msgspec.Struct)
    )
    struct: type[msgspec.Struct] = (
        hints[params[0].name] if takes_struct else _arguments(tool_name, params, hints, param_docs)
    )
    tool_def = HostTool(
        name=tool_name,
        description=description if description is not None else (summary or tool_name),
        args=struct,
        fn=fn,
        takes_struct=takes_struct,
        timeout_s=None if timeout_s is None else float(timeout_s),
        effect=declared or "unsafe",
        call_param=call_param,
    )
    try:
        tool_def.definition().schema()
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"host tool {tool_name!r}: its argument types cannot be sent as JSON: {exc}"
        ) from None
    return tool_def


def _built(fn: Callable[..., Any], name: str | None) -> HostTool:
    """:func:`_build` of ``fn`` under ``name``, once per pair: a runner's plain functions
    are offered on every turn, and each build reads a signature and makes a struct type
    (a new type each time, which the schema and decoder caches would each keep)."""
    try:
        return _built_once(fn, name)
    except TypeError:  # an unhashable callable: built each time
        return _build(fn, name, None)


@functools.lru_cache(maxsize=1024)
def _built_once(fn: Callable[..., Any], name: str | None) -> HostTool:
    return _build(fn, name, None)


@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    effect: Effect | None = None,
) -> HostTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    effect: Effect | None = None,
) -> Callable[[Callable[..., Any]], HostTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    effect: Effect | None = None,
) -> HostTool | Callable[[Callable[..., Any]], HostTool]:
    """Register ``fn`` (sync or async) as a host tool; usable as ``@tool`` or ``@tool(name=...)``.

    ``name`` defaults to the function's name, ``description`` to the first
    paragraph of its docstring; ``timeout_s`` bounds each call (default: the
    runner's ``tool_timeout_s``, 120 s); ``effect`` is what a second run of a
    call may do, ``"read"``, ``"idempotent"`` or ``"unsafe"`` (the default):
    it decides what happens to a call found in doubt after a crash.

    Raises:
        ConfigurationError: a name that breaks the tool-name rule or is taken by
            a built-in tool, a parameter without a type hint, ``*args`` /
            ``**kwargs``, a type that cannot be described as JSON, a
            ``timeout_s`` that is not a positive number, or an unknown ``effect``.
    """
    if fn is None:
        return lambda f: _build(f, name, description, timeout_s, effect)
    return _build(fn, name, description, timeout_s, effect)


def host_tool_defs(
    host_tools: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]] | None,
) -> dict[str, HostTool]:
    """Return the host tools by name, from a mapping (its keys are the names) or a list.

    Raises:
        ConfigurationError: a bad tool (see :func:`tool`) or two tools of one name.
    """
    if host_tools is None:
        return {}
    tools: dict[str, HostTool] = {}
    if isinstance(host_tools, Mapping):
        items = [_built(fn, key) for key, fn in host_tools.items()]
    else:
        items = [_built(fn, None) for fn in host_tools]
    for item in items:
        if item.name in tools:
            raise ConfigurationError(f"two host tools are named {item.name!r}")
        tools[item.name] = item
    return tools

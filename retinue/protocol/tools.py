"""Tool names, presets and capability ceilings: pure data and rules, no I/O.

A profile's ``tools`` is a preset (``"read"``, ``"modify"``, ``"none"``), an
exact list of tool names (built-in or registered by the host), or ``None``.
``None`` inherits: a profile that other profiles may spawn gets the tools
that *every* one of them has (the intersection, so it fits under each); a
profile only the host spawns gets none. :func:`resolve_profile_tools` does
that resolution once, over the static profile graph, and checks the
capability ceiling: a child's tools must lie within its parent's.

The coordinator tools (spawn, send, wait, ...) are not listed in ``tools``:
every LLM agent gets them, shaped by what its profile may spawn.

MCP servers' tools are granted as ``<server>.<tool>`` (``time.get_current_time``)
or all of one server's, now and later, with the pattern ``<server>.*``. A
pattern covers every exact name of its server; an exact name never covers the
pattern. The model is offered them as ``<server>__<tool>`` (:func:`offered_name`:
OpenAI's function names allow no dot), mapped back exactly by the toolbox.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from retinue.errors import ConfigurationError, ToolsNotPermitted

__all__ = [
    "BUILTIN_TOOLS",
    "COORDINATOR_TOOLS",
    "MCP_TOOL_PATTERN",
    "MODIFY_TOOLS",
    "PRESETS",
    "READ_TOOLS",
    "SPAWN_TOOLS",
    "TOOL_NAME_PATTERN",
    "ToolSpec",
    "ceiling_message",
    "check_offered_names",
    "covers",
    "exceeds_ceiling",
    "extra_tools",
    "is_mcp_name",
    "mcp_grant_servers",
    "mcp_granted",
    "offered_as",
    "offered_name",
    "resolve_profile_tools",
    "resolve_tools",
    "runner_tools",
    "split_mcp_name",
    "unavailable_tools",
]

COORDINATOR_TOOLS: tuple[str, ...] = (
    "spawn_subagent",
    "spawn_subagents",
    "send_message",
    "wait_agent",
    "list_agents",
    "interrupt_agent",
    "close_agent",
)
"""The coordinator tools every LLM agent may be offered; never named in ``tools``."""
SPAWN_TOOLS: tuple[str, ...] = ("spawn_subagent", "spawn_subagents")
"""The coordinator tools withheld from an agent that may not spawn."""
READ_TOOLS: tuple[str, ...] = ("read_file", "list_dir", "grep", "find")
"""The ``"read"`` preset: built-in tools that only read the workspace."""
MODIFY_TOOLS: tuple[str, ...] = (*READ_TOOLS, "write_file", "edit_file", "bash")
"""The ``"modify"`` preset: the read tools plus writing, editing and ``bash``."""
BUILTIN_TOOLS: tuple[str, ...] = MODIFY_TOOLS
"""Every built-in workspace tool."""
PRESETS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"none": (), "read": READ_TOOLS, "modify": MODIFY_TOOLS}
)
"""Preset name -> the tool names it stands for."""
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
"""What a tool name must fully match (the OpenAI function-name rule)."""

MCP_TOOL_PATTERN = r"^[a-z0-9_]{1,40}\.(\*|[A-Za-z0-9_.-]{1,128})$"
"""What a granted MCP tool fully matches: ``<server>.<tool>`` or ``<server>.*``.

The server's name follows the agent-name rules (and is not ``root``); the
tool's follows MCP's tool-name rule (letters, digits, ``_``, ``-``, ``.``).
"""

_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MCP_RE = re.compile(MCP_TOOL_PATTERN.strip("^$"))
_OFFERED_BAD = re.compile(r"[^A-Za-z0-9_-]")
_OFFERED_MAX = 64

ToolSpec = str | Sequence[str] | None
"""A profile's ``tools``: a preset name, an exact list of tool names, or None (inherit)."""


def resolve_tools(spec: object, *, owner: str = "") -> tuple[str, ...] | None:
    """Return the tool names ``spec`` stands for, in order without duplicates; None for None.

    ``owner`` names the profile in error messages.

    Raises:
        ConfigurationError: a string that is not a preset, a list that holds a
            non-string, a name that breaks :data:`TOOL_NAME_PATTERN`, or a
            coordinator tool name (those are given by ``subagents``).
    """
    where = f"profile {owner!r}: " if owner else ""
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec in PRESETS:
            return PRESETS[spec]
        raise ConfigurationError(
            f"{where}tools={spec!r} is not a preset; use one of {sorted(PRESETS)} "
            f"or a list of tool names such as [{spec!r}]"
        )
    if isinstance(spec, bytes | bytearray) or not isinstance(spec, Iterable):
        raise ConfigurationError(
            f"{where}tools must be a preset name or a list of tool names, not {type(spec).__name__}"
        )
    names: list[str] = []
    for name in spec:
        if not isinstance(name, str):
            raise ConfigurationError(
                f"{where}tool names must be strings, not {type(name).__name__}"
            )
        if name in COORDINATOR_TOOLS:
            raise ConfigurationError(
                f"{where}{name!r} is a coordinator tool; it is not listed in tools "
                "(an agent gets the spawn tools when its profile names subagents)"
            )
        if "." in name:
            if _MCP_RE.fullmatch(name) is None or name.startswith("root."):
                raise ConfigurationError(
                    f"{where}MCP tool {name!r} must be '<server>.<tool>' or '<server>.*' "
                    f"(matching {MCP_TOOL_PATTERN}; a server is named like an agent, not 'root')"
                )
        elif _NAME_RE.fullmatch(name) is None:
            raise ConfigurationError(f"{where}tool name {name!r} must match {TOOL_NAME_PATTERN}")
        if name not in names:
            names.append(name)
    return tuple(names)


def is_mcp_name(name: str) -> bool:
    """True for a granted MCP tool name or pattern (``time.get_current_time``, ``time.*``)."""
    return "." in name


def split_mcp_name(name: str) -> tuple[str, str] | None:
    """Return ``(server, tool)`` of an MCP grant (tool ``*`` for a pattern); None otherwise."""
    if "." not in name:
        return None
    server, _, tool = name.partition(".")
    return server, tool


def mcp_grant_servers(names: Iterable[str]) -> tuple[str, ...]:
    """Return, in first-seen order, the MCP servers that ``names`` grant tools of."""
    servers: list[str] = []
    for name in names:
        split = split_mcp_name(name)
        if split is not None and split[0] not in servers:
            servers.append(split[0])
    return tuple(servers)


def mcp_granted(server: str, tool: str, grants: Iterable[str]) -> bool:
    """True when ``grants`` holds ``<server>.<tool>`` or the pattern ``<server>.*``."""
    allowed = set(grants)
    return f"{server}.{tool}" in allowed or f"{server}.*" in allowed


def covers(name: str, grants: Iterable[str]) -> bool:
    """True when ``grants`` includes ``name``: the name itself, or its server's pattern.

    An exact MCP tool is covered by ``<server>.*``; a pattern only by the same pattern.
    """
    allowed = grants if isinstance(grants, set | frozenset) else set(grants)
    if name in allowed:
        return True
    split = split_mcp_name(name)
    return split is not None and split[1] != "*" and f"{split[0]}.*" in allowed


def offered_name(server: str, tool: str) -> str:
    """Return the function name a model is offered for an MCP tool: ``<server>__<tool>``.

    Characters OpenAI's function names refuse become ``_``; a name longer than
    64 characters keeps its first 55 and a hash of the whole. Distinct tools
    can map to one name (``a.b`` and ``a_b``): the toolbox refuses that.
    """
    name = f"{server}__{_OFFERED_BAD.sub('_', tool)}"
    if len(name) <= _OFFERED_MAX:
        return name
    digest = hashlib.sha256(f"{server}.{tool}".encode()).hexdigest()[:8]
    return f"{name[: _OFFERED_MAX - 9]}_{digest}"


def offered_as(name: str) -> str | None:
    """Return the function name a model is offered for granted tool ``name``.

    An MCP tool is offered as :func:`offered_name`; a built-in or host tool
    under its own name; a pattern (``<server>.*``) stands for no one name: None.
    """
    split = split_mcp_name(name)
    if split is None:
        return name
    return None if split[1] == "*" else offered_name(*split)


def check_offered_names(owner: str, names: Iterable[str]) -> None:
    """Check that no two of a profile's exact tool ``names`` would be offered under one name.

    The toolbox maps an offered name back to one tool, so two granted tools
    that a model would see as one function (``a.b_c`` and ``a.b.c``, or the
    host tool ``a__b`` and the MCP tool ``a.b``) cannot both be offered.
    Tools a server lists only at run time (granted by ``<server>.*``) are
    checked when they are listed (see :mod:`retinue.llm.mcp._manager`).

    Raises:
        ConfigurationError: two names map to one offered name (both named).
    """
    seen: dict[str, str] = {}
    for name in names:
        offered = offered_as(name)
        if offered is None:
            continue
        other = seen.setdefault(offered, name)
        if other != name:
            raise ConfigurationError(
                f"profile {owner!r}: tools {other!r} and {name!r} would both be offered to a "
                f"model as {offered!r} (function names allow no dot); grant only one of them, "
                "or rename one (on its MCP server, or the host tool)"
            )


def extra_tools(child: Iterable[str], parent: Iterable[str]) -> tuple[str, ...]:
    """Return, sorted, the tool names in ``child`` that ``parent`` lacks (empty: it fits).

    ``<server>.*`` in ``parent`` covers every tool of that server (see :func:`covers`).
    """
    allowed = set(parent)
    return tuple(sorted({name for name in child if not covers(name, allowed)}))


def unavailable_tools(names: Iterable[str], registered: Iterable[str]) -> tuple[str, ...]:
    """Return, sorted, the ``names`` that are neither built in nor among ``registered``.

    MCP tools are not counted: their servers are checked where they are declared.
    """
    known = set(BUILTIN_TOOLS).union(registered)
    return tuple(sorted({n for n in names if n not in known and not is_mcp_name(n)}))


def runner_tools(owner: str, spec: ToolSpec, ceiling: Iterable[str]) -> tuple[str, ...]:
    """Return the tool names a runner's own ``spec`` grants, within its profile's ``ceiling``.

    The one rule for a model runner built with tools of its own
    (``LiteLLMRunner(tools=...)``): it may narrow its profile's tools, never
    widen them. Checked at open (:func:`~retinue.actors.system._boot.profile_table`,
    so also by ``Team.check`` and ``retinue validate``) and by
    :func:`~retinue.llm.tools._toolbox.build_toolbox` for the ``tools`` it is given.

    Raises:
        ToolsNotPermitted: (a ConfigurationError) ``spec`` names tools the
            ceiling lacks (``.extra`` names them).
        ConfigurationError: ``spec`` is not a valid spec (see :func:`resolve_tools`).
    """
    names = resolve_tools(spec, owner=owner) or ()
    beyond = extra_tools(names, ceiling)
    if beyond:
        raise ToolsNotPermitted(
            f"profile {owner!r}: the runner asks for tools its profile does not grant: "
            f"{', '.join(beyond)}; a profile's tools are its capability ceiling "
            "(name them in Profile(tools=...))",
            beyond,
        )
    return names


def _common(lists: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """Return the tools every list grants (a pattern in one, an exact name in another: the name)."""
    first, *rest = lists
    sets = [set(names) for names in lists]
    common: list[str] = []
    for name in (n for names in (first, *rest) for n in names):
        if name not in common and all(covers(name, allowed) for allowed in sets):
            common.append(name)
    return tuple(common)


def exceeds_ceiling(child: ToolSpec, parent: ToolSpec) -> tuple[str, ...]:
    """Return, sorted, the tools a child profile's spec has beyond its parent's; () if it fits.

    A ``None`` child inherits, so it always fits; a ``None`` parent has no tools.
    Both specs must be valid (a :class:`~retinue.actors._profile.Profile` checks them).
    """
    if child is None or child == parent:
        return ()
    return extra_tools(resolve_tools(child) or (), resolve_tools(parent) or ())


def ceiling_message(child: str, parent: str, extra: Sequence[str]) -> str:
    """Return the error text for a child profile whose tools exceed its parent's."""
    return (
        f"profile {child!r} has tools that profile {parent!r}, which spawns it, lacks: "
        f"{', '.join(extra)}; a child's tools must lie within its parent's "
        f"(give {parent!r} those tools or remove them from {child!r})"
    )


def resolve_profile_tools(
    profiles: Mapping[str, tuple[ToolSpec, Sequence[str]]],
) -> dict[str, tuple[str, ...]]:
    """Resolve every profile's tools and check the capability ceilings of the static graph.

    ``profiles`` maps a profile name to ``(tools spec, subagent names)``; the
    graph must already be acyclic (:func:`~retinue.protocol.graph.validate_graph`).
    A ``None`` spec inherits the tools every profile that may spawn it has in
    common; a profile nothing spawns (the host's) inherits none. Subagent names
    that are not profiles are ignored (they are leaves the runtime refuses).

    Returns:
        profile name -> its effective tool names.

    Raises:
        ToolsNotPermitted: (a ConfigurationError) a child profile whose
            explicit tools are not all among a parent's (``.extra`` names them).
        ConfigurationError: a bad spec (see :func:`resolve_tools`), or an
            inheriting profile on a cycle.
    """
    explicit = {name: resolve_tools(spec, owner=name) for name, (spec, _) in profiles.items()}
    parents: dict[str, list[str]] = {name: [] for name in profiles}
    for name, (_, subagents) in profiles.items():
        for child in subagents:
            if child in parents and name not in parents[child]:
                parents[child].append(name)
    effective: dict[str, tuple[str, ...]] = {}
    for start in profiles:
        # Iterative depth-first walk up the graph, parents resolved first; a
        # parent met again while its own frame is open is a cycle.
        frames: list[tuple[str, list[str]]] = [(start, list(parents[start]))]
        open_frames = {start}
        while frames:
            name, todo = frames[-1]
            if name in effective:
                frames.pop()
                open_frames.discard(name)
                continue
            own = explicit[name]
            if own is None and todo:
                parent = todo.pop()
                if parent in open_frames:
                    raise ConfigurationError(
                        f"profile {name!r} inherits its tools through a delegation cycle; "
                        "give the profiles on the cycle explicit tools"
                    )
                if parent not in effective:
                    frames.append((parent, list(parents[parent])))
                    open_frames.add(parent)
                continue
            frames.pop()
            open_frames.discard(name)
            if own is not None:
                effective[name] = own
            elif not parents[name]:
                effective[name] = ()
            else:
                effective[name] = _common([effective[p] for p in parents[name]])
    for name, (_, subagents) in profiles.items():
        for child in subagents:
            if child in effective:
                extra = extra_tools(effective[child], effective[name])
                if extra:
                    raise ToolsNotPermitted(ceiling_message(child, name, extra), extra)
    return effective

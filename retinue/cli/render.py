"""What a run looks like on a terminal: a live rich table, plain lines, or JSON events.

Text helpers (:func:`clip`, :func:`plain_row`, :func:`ordered`, :func:`table`)
and the three views a run is drawn with (:func:`make_view`). Under provider
limits a view also shows the model calls waiting for admission
(:meth:`View.admission`) and each back-off (``ProviderBackoff``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import msgspec

from retinue.protocol.messages import (
    AgentInfo,
    AgentState,
    ApprovalAnswered,
    ApprovalRequested,
    Event,
    ProviderBackoff,
    TurnRestarting,
    TurnSettled,
    TurnStarted,
)
from retinue.protocol.provider_limits import LimitSnapshot
from retinue.protocol.text import safe_terminal_text

__all__ = [
    "JsonView",
    "LiveView",
    "PlainView",
    "View",
    "admission_line",
    "clip",
    "fork_text",
    "in_tree",
    "make_view",
    "ordered",
    "plain_row",
    "state_text",
    "table",
    "usage_of",
]


# -- text helpers ---------------------------------------------------------------------------


def clip(text: str, limit: int) -> str:
    """Return ``text`` on one safe line, at most ``limit`` characters, ``…`` when cut."""
    flat = " ".join(safe_terminal_text(text, len(text)).split())
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"


def usage_of(info: AgentInfo) -> tuple[int, float]:
    """Return (tokens, cost in USD) an agent's model calls have spent."""
    return info.usage.total_tokens, info.usage.cost_usd


def _elapsed(info: AgentInfo, now: float) -> float:
    end = now if info.state.busy else info.updated_at
    return max(0.0, end - info.created_at)


def in_tree(path: str, roots: Sequence[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or lies below one."""
    return any(path == r or path.startswith(r + "/") for r in roots)


def ordered(agents: Sequence[AgentInfo]) -> list[AgentInfo]:
    """Agents in tree order: each parent before its children, siblings by creation."""
    by_parent: dict[str, list[AgentInfo]] = {}
    for agent in sorted(agents, key=lambda a: a.created_at):
        by_parent.setdefault(agent.parent_path, []).append(agent)
    paths = {a.path for a in agents}
    out: list[AgentInfo] = []
    stack = [a for a in reversed(by_parent.get("/root", []))]
    stack += [
        a for a in reversed(agents) if a.parent_path != "/root" and a.parent_path not in paths
    ]
    seen: set[str] = set()
    while stack:
        agent = stack.pop()
        if agent.id in seen:
            continue
        seen.add(agent.id)
        out.append(agent)
        stack.extend(reversed(by_parent.get(agent.path, [])))
    return out


def state_text(info: AgentInfo, now: float) -> str:
    """An agent's state with its generation, and its attempt and next restart when it has them.

    ``running g3 attempt 3``, ``restarting g2 attempt 2 in 4.1s``.
    """
    text = f"{info.state.value} g{info.generation}"
    if info.attempt > 1:
        text += f" attempt {info.attempt}"
    if info.state is AgentState.RESTARTING and info.restart_due_at is not None:
        text += f" in {max(0.0, info.restart_due_at - now):.1f}s"
    return text


def fork_text(info: AgentInfo) -> str:
    """`` (fork of /root/lead@2)`` for a fork (its origin and generation), else ``""``."""
    origin = info.forked_from
    return "" if origin is None else f" (fork of {origin.path}@{origin.generation})"


def plain_row(info: AgentInfo, now: float, width: int = 70) -> str:
    """One line for an agent: path, profile, state, generation, elapsed, tokens, result."""
    tokens, _ = usage_of(info)
    text = info.error if info.state is AgentState.FAILED else info.output
    if info.state is AgentState.RESTARTING:
        text = info.last_error
    line = f"{info.path}{fork_text(info)}  {info.profile}  {state_text(info, now)}"
    line += f"  {_elapsed(info, now):.1f}s"
    if tokens:
        line += f"  {tokens} tok"
    if text:
        line += "  " + clip(text, width)
    return line


def admission_line(waiting: Sequence[str], limits: Sequence[LimitSnapshot]) -> str:
    """What a run shows of its provider limits: the calls waiting, each busy limit's figures.

    ``3 model calls waiting for admission; openai: 4 in flight, 3 waiting, level 4, 2 x 429``
    (with ``learned 270 requests/window`` after the level once a rate is learned, or
    ``stated 500 requests/window`` once the provider's headers state it).
    """
    count = len(waiting)
    text = f"{count} model call{'' if count == 1 else 's'} waiting for admission"
    parts = []
    for limit in limits:
        if not (limit.in_flight or limit.waiting or limit.rate_limited):
            continue
        part = f"{limit.match}: {limit.in_flight} in flight, {limit.waiting} waiting"
        if limit.level is not None:
            part += f", level {limit.level:g}"
        if limit.stated_requests is not None:
            part += f", stated {limit.stated_requests} requests/window"
        elif limit.learned_requests is not None:
            part += f", learned {limit.learned_requests} requests/window"
        if limit.rate_limited:
            part += f", {limit.rate_limited} x 429"
        if limit.closed_until is not None:
            part += f", closed for {max(0.0, limit.closed_until - time.time()):.1f}s"
        parts.append(part)
    return "; ".join([text, *parts])


def table(
    agents: Sequence[AgentInfo],
    title: str,
    waiting: frozenset[str] = frozenset(),
    caption: str = "",
) -> Any:
    """A rich table of ``agents`` in tree order (imported only on a terminal); an agent whose
    model call waits for admission (a path in ``waiting``) says so; ``caption`` goes below."""
    from rich.table import Table
    from rich.text import Text

    styles = {
        AgentState.STARTING: "yellow",
        AgentState.RUNNING: "bold cyan",
        AgentState.COMPLETED: "green",
        AgentState.FAILED: "bold red",
        AgentState.INTERRUPTED: "magenta",
        AgentState.CLOSED: "dim",
        AgentState.RESTARTING: "bold yellow",
        AgentState.AWAITING_APPROVAL: "bold magenta",
    }
    now = time.time()
    table = Table(
        title=title,
        title_justify="left",
        box=None,
        pad_edge=False,
        caption=caption or None,
        caption_justify="left",
    )
    for column in ("path", "profile", "state", "time", "tokens", "result"):
        table.add_column(column, no_wrap=True, overflow="ellipsis")
    for info in ordered(agents):
        tokens, _ = usage_of(info)
        text = info.error if info.state is AgentState.FAILED else info.output
        if info.state is AgentState.RESTARTING:
            text = info.last_error
        style = styles.get(info.state, "")
        table.add_row(
            Text(info.path + fork_text(info)),
            Text(info.profile, style="dim"),
            Text(
                state_text(info, now) + (" · admission" if info.path in waiting else ""),
                style=style,
            ),
            f"{_elapsed(info, now):.1f}s",
            f"{tokens:,}" if tokens else "",
            Text(clip(text or "", 60), style="red" if info.state is AgentState.FAILED else ""),
        )
    return table


# -- views ------------------------------------------------------------------------------------


class View:
    """How a run is shown: rich live table, plain lines or JSON events."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def start(self, title: str) -> None:
        """Begin showing a run."""

    def event(self, event: Event, agents: dict[str, AgentInfo]) -> None:
        """Show one committed transition of the followed tree."""

    def update(self, agents: Sequence[AgentInfo]) -> None:
        """Show the tree as it is now."""

    def admission(self, waiting: Sequence[str], limits: Sequence[LimitSnapshot]) -> None:
        """Show the model calls waiting for admission (``waiting``: their agents' paths) and
        the provider limits' figures; called when they change."""

    def stop(self) -> None:
        """End the live part; later output goes below it."""


class PlainView(View):
    """One line per turn that starts or settles, for logs and pipes."""

    def __init__(self, out: TextIO) -> None:
        super().__init__(out)
        self.started = time.time()

    def start(self, title: str) -> None:
        print(title, file=self.out, flush=True)

    def admission(self, waiting: Sequence[str], limits: Sequence[LimitSnapshot]) -> None:
        at = time.time() - self.started
        print(f"[{at:6.1f}s] {admission_line(waiting, limits)}", file=self.out, flush=True)

    def event(self, event: Event, agents: dict[str, AgentInfo]) -> None:
        at = event.at - self.started
        if isinstance(event, ProviderBackoff):
            print(f"[{at:6.1f}s] {event.path}  {_backoff_line(event)}", file=self.out, flush=True)
            return
        if isinstance(event, TurnRestarting | ApprovalRequested | ApprovalAnswered):
            print(f"[{at:6.1f}s] {event.path}  {_supervision_line(event)}", file=self.out)
            self.out.flush()
            return
        if not isinstance(event, TurnStarted | TurnSettled):
            return
        info = agents.get(event.agent_id)
        profile = info.profile if info is not None else "?"
        state = "running" if isinstance(event, TurnStarted) else event.status.value
        at = event.at - self.started
        line = f"[{at:6.1f}s] {event.path}  {profile}  {state} g{event.generation}"
        if isinstance(event, TurnSettled):
            text = event.error
            if text is None and info is not None and info.generation == event.generation:
                text = info.output
            if text:
                line += "  " + clip(text, 100)
        print(line, file=self.out, flush=True)


def _backoff_line(event: ProviderBackoff) -> str:
    """What a plain line says of a provider limit's back-off."""
    text = f"429 from {event.model}: provider limit {event.match} backs off"
    if event.lowered:
        before = "unbounded" if event.level_before is None else f"{event.level_before:g}"
        text += f", level {before} -> {event.level:g}"
    if event.retry_after_s is not None:
        text += f", closed for {event.retry_after_s:g}s (Retry-After)"
    return text


def _supervision_line(event: TurnRestarting | ApprovalRequested | ApprovalAnswered) -> str:
    """What a plain line says of a restart or an approval."""
    if isinstance(event, TurnRestarting):
        return (
            f"restarting g{event.generation} attempt {event.attempt} in {event.delay_s:.1f}s  "
            + clip(event.error, 100)
        )
    if isinstance(event, ApprovalRequested):
        return (
            f"awaiting approval {event.request_id}: {event.tool} {clip(event.arguments, 80)} "
            "(retinue approvals)"
        )
    verdict = "approved" if event.approved else f"denied: {clip(event.reason or '', 80)}"
    return f"{event.tool} {verdict} ({event.request_id})"


class JsonView(View):
    """One JSON object per line: the runtime's event structs, ``admission_waiting`` when the
    calls waiting for admission change, then a final ``run_finished``."""

    def event(self, event: Event, agents: dict[str, AgentInfo]) -> None:
        self.out.write(msgspec.json.encode(event).decode() + "\n")
        self.out.flush()

    def admission(self, waiting: Sequence[str], limits: Sequence[LimitSnapshot]) -> None:
        line = {"event": "admission_waiting", "at": time.time(), "waiting": list(waiting)}
        line["limits"] = msgspec.to_builtins(list(limits))
        self.out.write(msgspec.json.encode(line).decode() + "\n")
        self.out.flush()


class LiveView(View):
    """A rich table redrawn in place: path, profile, state, time, tokens, result."""

    def __init__(self, out: TextIO) -> None:
        super().__init__(out)
        from rich.console import Console

        self.console = Console(file=out)
        self.live: Any = None
        self.title = ""
        self.waiting: frozenset[str] = frozenset()
        self.caption = ""
        self.agents: Sequence[AgentInfo] = ()

    def start(self, title: str) -> None:
        from rich.live import Live

        self.title = title
        self.live = Live(
            table([], title), console=self.console, refresh_per_second=8, transient=False
        )
        self.live.start()

    def update(self, agents: Sequence[AgentInfo]) -> None:
        self.agents = agents
        if self.live is not None:
            self.live.update(table(agents, self.title, self.waiting, self.caption))

    def admission(self, waiting: Sequence[str], limits: Sequence[LimitSnapshot]) -> None:
        self.waiting = frozenset(waiting)
        self.caption = admission_line(waiting, limits) if waiting else ""
        self.update(self.agents)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def make_view(json_mode: bool, out: TextIO | None = None) -> View:
    """JSON events with ``--json``; a live table on a terminal; plain lines otherwise."""
    stream = out if out is not None else sys.stdout
    if json_mode:
        return JsonView(stream)
    if stream.isatty() and os.environ.get("TERM") != "dumb":
        return LiveView(stream)
    return PlainView(stream)

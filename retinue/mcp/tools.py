"""What each ``retinue mcp`` tool does, over the public Runtime API (no MCP SDK here).

Every function is async, uses only the runtime's ``*_async`` calls (so the
server's event loop never blocks), returns JSON-ready data, and lets a
:class:`~retinue.errors.RetinueError` propagate: the server turns it into an
``isError`` result with its one-line message. Each tool checks every argument
before it starts anything (a ``run_team`` whose ``wait_s`` is too long starts
no lead). The runtime comes from an :class:`~retinue.mcp.opening.Opening`
(over stdio it opens after the handshake); the bounds a tool checks are
:class:`Bounds`, which the server's schemas also state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from retinue.errors import InvalidArgument, NotPermitted, UnknownAgent, UnknownProfile, WaitTimeout
from retinue.mcp.opening import Opening
from retinue.mcp.waits import Gone, Handovers, leased_wait
from retinue.protocol.checks import check_seconds
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion
from retinue.protocol.text import truncate_utf8
from retinue.runtime import Runtime
from retinue.team import Team

__all__ = [
    "MAX_TREE_AGENTS",
    "PROGRESS_INTERVAL_S",
    "TREE_PAGE",
    "Bounds",
    "Progress",
    "Tools",
]

MAX_TREE_AGENTS = 500
"""Most agents one ``tree`` call (or one ``retinue://tree`` page) lists."""
TREE_PAGE = 200
"""Agents a ``tree`` call or a ``retinue://tree`` page lists by default."""
MAX_TRANSCRIPT_TAIL = 200
"""Most transcript messages ``inspect`` shows."""
PROGRESS_INTERVAL_S = 1.0
"""How often a waiting ``run_team`` or ``wait`` reports the tree's states."""
_TEXT_MAX = 2000  # an output or error shown in a tree row is cut to this many bytes

Progress = Callable[[float, float, str], Awaitable[None]]
"""``report(progress, total, message)``: sends one progress notification (if asked for)."""


@dataclass(frozen=True)
class Bounds:
    """The bounds the tools check, from the runtime's limits (and stated in their schemas)."""

    wait_max_s: float
    wait_default_s: float
    message_max_bytes: int

    @classmethod
    def of(cls, limits: Limits) -> Bounds:
        """The bounds of a runtime with ``limits``."""
        return cls(limits.wait_max_s, limits.wait_default_s, limits.message_max_bytes)

    def seconds(self, value: object, field: str) -> float:
        """``value`` checked as a wait: a finite number of seconds from 0 to ``wait_max_s``.

        Raises:
            ArgumentTypeError: not a number.
            InvalidArgument: NaN, infinite, negative, or above ``wait_max_s``.
        """
        seconds = check_seconds(value, field)
        if seconds > self.wait_max_s:
            raise InvalidArgument(
                f"{field} {value} exceeds wait_max_s {self.wait_max_s:g}; wait less (then "
                "call wait again), or raise the limit (RETINUE_WAIT_MAX_S, [limits] wait_max_s)"
            )
        return seconds


def _clip(text: str | None) -> str | None:
    return None if text is None else truncate_utf8(text, _TEXT_MAX)[0]


def agent_row(info: AgentInfo) -> dict[str, Any]:
    """One agent as a tree row: path, id, profile, state, generation, result, tokens."""
    return {
        "path": info.path,
        "id": info.id,
        "profile": info.profile,
        "state": info.state.value,
        "generation": info.generation,
        "output": _clip(info.output),
        "error": _clip(info.error),
        "tokens": info.usage.prompt_tokens + info.usage.completion_tokens,
    }


def completion_value(completion: Completion) -> dict[str, Any]:
    """A completion as a tool result."""
    value: dict[str, Any] = {
        "path": completion.path,
        "status": completion.status.value,
        "generation": completion.generation,
        "output": completion.output,
    }
    if completion.error is not None:
        value["error"] = completion.error
    return value


def _below(info: AgentInfo, root: str) -> bool:
    return info.path == root or info.path.startswith(root + "/")


class Tools:
    """The tools of one server: a runtime (or its opening) and, when given, the team its lead
    comes from."""

    def __init__(
        self, rt: Runtime | Opening, team: Team | None, limits: Limits | None = None
    ) -> None:
        """Serve ``rt``; ``team`` gives ``run_team`` its lead and default name.

        ``limits`` are the runtime's (default: an open ``rt``'s; else the
        team's, else the environment's): what :attr:`bounds` checks.
        """
        self.opening = Opening.ready(rt) if isinstance(rt, Runtime) else rt
        self.team = team
        if limits is None:
            if isinstance(rt, Runtime):
                limits = rt.limits
            else:
                limits = team.limits if team is not None else Limits.from_env()
        self.bounds = Bounds.of(limits)
        self.handovers = Handovers()
        """The answers of HTTP waits not known delivered yet (see :mod:`retinue.mcp.waits`)."""

    async def confirm(self, session: str) -> int:
        """``session`` sent a message or ended in order: its answered waits were delivered."""
        if not self.handovers.answered:
            return 0
        return await self.handovers.confirm(await self.runtime(), session)

    async def runtime(self) -> Runtime:
        """The runtime served, once it is open.

        Raises:
            RetinueError: it could not be opened (``StoreLocked``...).
        """
        return await self.opening.runtime()

    async def _progress(self, rt: Runtime, root: str, report: Progress) -> None:
        """Report the subtree's states every :data:`PROGRESS_INTERVAL_S` until cancelled."""
        while True:
            agents = [a for a in await rt.agents_async() if _below(a, root)]
            counts: dict[str, int] = {}
            for agent in agents:
                counts[agent.state.value] = counts.get(agent.state.value, 0) + 1
            settled = sum(1 for a in agents if not a.state.busy)
            states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
            await report(settled, max(len(agents), 1), f"{root}: {states or 'no agents'}")
            await asyncio.sleep(PROGRESS_INTERVAL_S)

    async def _wait(
        self,
        rt: Runtime,
        ref: str,
        timeout: float,
        report: Progress,
        gone: Gone | None,
        session: str | None,
    ) -> dict[str, Any]:
        info = await rt.get_async(ref)
        ticker = asyncio.create_task(self._progress(rt, info.path, report))
        handover = None if session is None else (self.handovers, session)
        try:
            completion = await leased_wait(rt, info.id, timeout, gone, handover)
        except WaitTimeout:
            now = await rt.get_async(ref)
            return {"event": "timed_out", "path": now.path, "state": now.state.value}
        finally:
            ticker.cancel()
        return completion_value(completion)

    async def _free_name(self, rt: Runtime, wanted: str) -> str:
        for n in range(1, 1000):
            name = wanted if n == 1 else f"{wanted[:36]}_{n}"
            try:
                await rt.get_async(f"/root/{name}")
            except UnknownAgent:
                return name
        raise InvalidArgument(f"every name like {wanted!r} is taken; pass name")

    async def run_team(
        self,
        task: str,
        agent: str | None,
        name: str | None,
        wait_s: float,
        report: Progress,
        gone: Gone | None = None,
        session: str | None = None,
    ) -> dict[str, Any]:
        """Start the team's lead (or ``agent``) on ``task``; wait up to ``wait_s`` for it.

        Every argument is checked before the lead starts.
        """
        if self.team is None:
            raise NotPermitted(
                "this server has no team: start it with 'retinue mcp --team TEAM' (or use spawn)"
            )
        seconds = self.bounds.seconds(wait_s, "wait_s")
        chosen = agent or self.team.lead
        if chosen not in self.team.agents:
            known = ", ".join(sorted(self.team.agents))
            raise UnknownProfile(f"the team has no agent {chosen[:60]!r}; its agents: {known}")
        rt = await self.runtime()
        info = await rt.spawn_async(
            chosen, task, name=name or await self._free_name(rt, self.team.name)
        )
        if seconds <= 0:
            return {"path": info.path, "id": info.id, "state": info.state.value}
        return await self._wait(rt, info.id, seconds, report, gone, session)

    async def spawn(self, profile: str, task: str, parent: str, name: str | None) -> dict[str, Any]:
        """Start an agent of ``profile`` under ``parent``; return it at once."""
        rt = await self.runtime()
        info = await rt.spawn_async(profile, task, name=name, parent=parent)
        return agent_row(info)

    async def wait(
        self,
        ref: str,
        timeout_s: float | None,
        report: Progress,
        gone: Gone | None = None,
        session: str | None = None,
    ) -> dict[str, Any]:
        """The agent's next completion, or ``{"event": "timed_out"}`` (it keeps running).

        Waits under a lease, acknowledged once ``session`` is known to have the
        answer: a completion taken for a client that went away goes to the
        next wait (see :mod:`retinue.mcp.waits`).
        """
        given = self.bounds.wait_default_s if timeout_s is None else timeout_s
        seconds = self.bounds.seconds(given, "timeout_s")
        return await self._wait(await self.runtime(), ref, seconds, report, gone, session)

    async def send(self, ref: str, message: str) -> dict[str, Any]:
        """Put ``message`` in the agent's mailbox (read by its next turn)."""
        sent = await (await self.runtime()).send_async(ref, message)
        return {"id": sent.id, "recipient": sent.recipient}

    async def tree(
        self, ref: str | None, include_closed: bool, limit: int, offset: int = 0
    ) -> dict[str, Any]:
        """One page of the agents by path (below ``ref`` when given): at most ``limit`` from
        ``offset``, with the count of all and where the next page starts."""
        if not 1 <= limit <= MAX_TREE_AGENTS:
            raise InvalidArgument(f"limit must be 1-{MAX_TREE_AGENTS}, not {limit}")
        if offset < 0:
            raise InvalidArgument(f"offset must not be negative, not {offset}")
        rt = await self.runtime()
        agents = await rt.agents_async(include_closed=include_closed)
        if ref is not None:
            root = (await rt.get_async(ref)).path
            agents = [a for a in agents if _below(a, root)]
        agents.sort(key=lambda a: a.path)
        page = agents[offset : offset + limit]
        value: dict[str, Any] = {"agents": [agent_row(a) for a in page], "count": len(agents)}
        if offset:
            value["offset"] = offset
        after = len(agents) - offset - len(page)
        if after > 0:
            value["truncated"] = after
            value["next_offset"] = offset + len(page)
        return value

    async def inspect(self, ref: str, transcript_tail: int) -> dict[str, Any]:
        """One agent in full: snapshot, unread messages, pending completions, transcript tail."""
        rt = await self.runtime()
        detail = await rt.inspect_async(ref, transcript_tail=transcript_tail)
        value: dict[str, Any] = msgspec.to_builtins(detail)
        return value

    async def interrupt(self, ref: str, tree: bool) -> dict[str, Any]:
        """Interrupt the agent's turn (or every turn of its subtree)."""
        rt = await self.runtime()
        if tree:
            return {"agents": [agent_row(a) for a in await rt.interrupt_tree_async(ref)]}
        return agent_row(await rt.interrupt_async(ref))

    async def close(self, ref: str, tree: bool) -> dict[str, Any]:
        """Close the agent (or its whole subtree, children first)."""
        rt = await self.runtime()
        if tree:
            return {"agents": [agent_row(a) for a in await rt.close_tree_async(ref)]}
        return agent_row(await rt.close_async(ref))

    async def resume(self, ref: str) -> dict[str, Any]:
        """Re-run an interrupted agent's task."""
        return agent_row(await (await self.runtime()).resume_async(ref))

    async def approvals(self, ref: str | None) -> dict[str, Any]:
        """The tool calls waiting for approval (of ``ref``'s subtree when given), oldest first."""
        pending = await (await self.runtime()).approvals_async(ref)
        return {"approvals": [msgspec.to_builtins(r) for r in pending], "count": len(pending)}

    async def approve(self, request_id: str, note: str | None) -> dict[str, Any]:
        """Approve one pending request: its call runs and the model gets the result."""
        await (await self.runtime()).approve_async(request_id, note=note)
        return {"approved": request_id}

    async def deny(self, request_id: str, reason: str) -> dict[str, Any]:
        """Deny one pending request: the model gets ``denied: <reason>``."""
        await (await self.runtime()).deny_async(request_id, reason=reason)
        return {"denied": request_id, "reason": reason}

    async def tree_resource(self, offset: int = 0, limit: int = TREE_PAGE) -> dict[str, Any]:
        """``retinue://tree``: one page of the live agents by path, as :meth:`tree` gives it,
        with the URI of the next page (``next``) while there is one."""
        page = await self.tree(None, False, limit, offset)
        if "next_offset" in page:
            page["next"] = f"retinue://tree?offset={page['next_offset']}&limit={limit}"
        return page

    async def agent_resource(self, path: str) -> dict[str, Any]:
        """``retinue://agent/{path}``: one agent (a path without its leading ``/``, or an id)."""
        ref = "/" + path if path.startswith("root") else path
        return await self.inspect(ref, 10)

"""What each ``retinue mcp`` tool does, over the public Runtime API (no MCP SDK here).

Every function is async, uses only the runtime's ``*_async`` calls (so the
server's event loop never blocks), returns JSON-ready data, and lets a
:class:`~retinue.errors.RetinueError` propagate: the server turns it into an
``isError`` result with its one-line message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from retinue.errors import InvalidArgument, NotPermitted, UnknownAgent, WaitTimeout
from retinue.protocol.messages import AgentInfo, Completion
from retinue.protocol.text import truncate_utf8
from retinue.runtime import Runtime
from retinue.team import Team

__all__ = [
    "MAX_TREE_AGENTS",
    "PROGRESS_INTERVAL_S",
    "Progress",
    "Tools",
]

MAX_TREE_AGENTS = 500
"""Most agents one ``tree`` call lists (the result says how many more there are)."""
PROGRESS_INTERVAL_S = 1.0
"""How often a waiting ``run_team`` or ``wait`` reports the tree's states."""
_TEXT_MAX = 2000  # an output or error shown in a tree row is cut to this many bytes

Progress = Callable[[float, float, str], Awaitable[None]]
"""``report(progress, total, message)``: sends one progress notification (if asked for)."""


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
    """The tools of one server: a runtime and, when given, the team its lead comes from."""

    def __init__(self, rt: Runtime, team: Team | None) -> None:
        """Serve ``rt``; ``team`` gives ``run_team`` its lead and default name."""
        self.rt = rt
        self.team = team

    async def _progress(self, root: str, report: Progress) -> None:
        """Report the subtree's states every :data:`PROGRESS_INTERVAL_S` until cancelled."""
        while True:
            agents = [a for a in await self.rt.agents_async() if _below(a, root)]
            counts: dict[str, int] = {}
            for agent in agents:
                counts[agent.state.value] = counts.get(agent.state.value, 0) + 1
            settled = sum(1 for a in agents if not a.state.busy)
            states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
            await report(settled, max(len(agents), 1), f"{root}: {states or 'no agents'}")
            await asyncio.sleep(PROGRESS_INTERVAL_S)

    async def _wait(self, ref: str, timeout: float | None, report: Progress) -> dict[str, Any]:
        info = await self.rt.get_async(ref)
        ticker = asyncio.create_task(self._progress(info.path, report))
        try:
            completion = await self.rt.wait_async(ref, timeout)
        except WaitTimeout:
            now = await self.rt.get_async(ref)
            return {"event": "timed_out", "path": now.path, "state": now.state.value}
        finally:
            ticker.cancel()
        return completion_value(completion)

    async def _free_name(self, wanted: str) -> str:
        for n in range(1, 1000):
            name = wanted if n == 1 else f"{wanted[:36]}_{n}"
            try:
                await self.rt.get_async(f"/root/{name}")
            except UnknownAgent:
                return name
        raise InvalidArgument(f"every name like {wanted!r} is taken; pass name")

    async def run_team(
        self, task: str, agent: str | None, name: str | None, wait_s: float, report: Progress
    ) -> dict[str, Any]:
        """Start the team's lead (or ``agent``) on ``task``; wait up to ``wait_s`` for it."""
        if self.team is None:
            raise NotPermitted(
                "this server has no team: start it with 'retinue mcp --team TEAM' (or use spawn)"
            )
        chosen = agent or self.team.lead
        info = await self.rt.spawn_async(
            chosen, task, name=name or await self._free_name(self.team.name)
        )
        if wait_s <= 0:
            return {"path": info.path, "id": info.id, "state": info.state.value}
        return await self._wait(info.id, wait_s, report)

    async def spawn(self, profile: str, task: str, parent: str, name: str | None) -> dict[str, Any]:
        """Start an agent of ``profile`` under ``parent``; return it at once."""
        info = await self.rt.spawn_async(profile, task, name=name, parent=parent)
        return agent_row(info)

    async def wait(self, ref: str, timeout_s: float | None, report: Progress) -> dict[str, Any]:
        """The agent's next completion, or ``{"event": "timed_out"}`` (it keeps running)."""
        return await self._wait(ref, timeout_s, report)

    async def send(self, ref: str, message: str) -> dict[str, Any]:
        """Put ``message`` in the agent's mailbox (read by its next turn)."""
        sent = await self.rt.send_async(ref, message)
        return {"id": sent.id, "recipient": sent.recipient}

    async def tree(self, ref: str | None, include_closed: bool, limit: int) -> dict[str, Any]:
        """The agents by path (below ``ref`` when given), at most ``limit`` of them."""
        if not 1 <= limit <= MAX_TREE_AGENTS:
            raise InvalidArgument(f"limit must be 1-{MAX_TREE_AGENTS}, not {limit}")
        agents = await self.rt.agents_async(include_closed=include_closed)
        if ref is not None:
            root = (await self.rt.get_async(ref)).path
            agents = [a for a in agents if _below(a, root)]
        agents.sort(key=lambda a: a.path)
        rows = [agent_row(a) for a in agents[:limit]]
        value: dict[str, Any] = {"agents": rows, "count": len(agents)}
        if len(agents) > limit:
            value["truncated"] = len(agents) - limit
        return value

    async def inspect(self, ref: str, transcript_tail: int) -> dict[str, Any]:
        """One agent in full: snapshot, unread messages, pending completions, transcript tail."""
        detail = await self.rt.inspect_async(ref, transcript_tail=transcript_tail)
        value: dict[str, Any] = msgspec.to_builtins(detail)
        return value

    async def interrupt(self, ref: str, tree: bool) -> dict[str, Any]:
        """Interrupt the agent's turn (or every turn of its subtree)."""
        if tree:
            return {"agents": [agent_row(a) for a in await self.rt.interrupt_tree_async(ref)]}
        return agent_row(await self.rt.interrupt_async(ref))

    async def close(self, ref: str, tree: bool) -> dict[str, Any]:
        """Close the agent (or its whole subtree, children first)."""
        if tree:
            return {"agents": [agent_row(a) for a in await self.rt.close_tree_async(ref)]}
        return agent_row(await self.rt.close_async(ref))

    async def resume(self, ref: str) -> dict[str, Any]:
        """Re-run an interrupted agent's task."""
        return agent_row(await self.rt.resume_async(ref))

    async def approvals(self, ref: str | None) -> dict[str, Any]:
        """The tool calls waiting for approval (of ``ref``'s subtree when given), oldest first."""
        pending = await self.rt.approvals_async(ref)
        return {"approvals": [msgspec.to_builtins(r) for r in pending], "count": len(pending)}

    async def approve(self, request_id: str, note: str | None) -> dict[str, Any]:
        """Approve one pending request: its call runs and the model gets the result."""
        await self.rt.approve_async(request_id, note=note)
        return {"approved": request_id}

    async def deny(self, request_id: str, reason: str) -> dict[str, Any]:
        """Deny one pending request: the model gets ``denied: <reason>``."""
        await self.rt.deny_async(request_id, reason=reason)
        return {"denied": request_id, "reason": reason}

    async def tree_resource(self) -> list[dict[str, Any]]:
        """``retinue://tree``: every live agent by path."""
        agents = sorted(await self.rt.agents_async(), key=lambda a: a.path)
        return [agent_row(a) for a in agents]

    async def agent_resource(self, path: str) -> dict[str, Any]:
        """``retinue://agent/{path}``: one agent (a path without its leading ``/``, or an id)."""
        ref = "/" + path if path.startswith("root") else path
        return await self.inspect(ref, 10)

"""The coordinator tools a model sees: spawn, spawn many, send, wait, list, interrupt, close.

Each tool is a msgspec struct (its arguments and its schema) and a handler
over the turn's async twins (``turn.spawn_async``, ``turn.run_async`` ...).
The spawn tools' ``agent`` argument is an enum of the profiles this agent may
spawn, listed in its description. An agent that may not spawn (no subagents,
or already at the depth cap) is offered ``send_message`` alone: it has no
subagents to wait for, list, interrupt or close, and every schema it is not
offered is tokens not paid on each of its calls. The set depends only on the
profile and the depth, so it is the same on every call of an agent (providers'
prompt caches keep matching). The other tools take an agent reference: a
child's name or path, or an agent id.

Results are JSON objects: a synchronous spawn returns ``{"path", "status",
"output"}`` (plus ``"error"`` when the child failed or was interrupted, or
still runs when the wait ran out: ``"status": "running"``; plus ``"messages"``
the child sent meanwhile); an asynchronous one ``{"dispatched": true,
"path"}``, its completion arriving as a message of a later turn.
``spawn_subagents`` returns ``{"results": [...]}`` in the order given, a
refused entry keeping its place as ``{"agent", "error"}``. A refused operation
raises, and the toolbox turns it into ``{"error": ...}``; an error about a
malformed reference names the tool's own argument (``to``, ``agent``).

Exactly once: a spawn carries its tool call's idempotency key (each entry of
a batch its own, ``<key>.<index>``) and a message carries it as its dedup
key, so a call found in doubt after a crash and run again
(:mod:`retinue.protocol.effects`) finds the child or message its first run
made instead of making a second. Run again, a spawn does not wait: the
child's completion reaches the agent as a message of its turn, as the events
a lost turn's waits took do; ``wait_agent`` run again waits for nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from retinue.actors.commands import SpawnMany, SpawnRequest
from retinue.actors.turns import BatchRequest
from retinue.errors import RetinueError, WaitTimeout
from retinue.llm.tools._arguments import ToolDef
from retinue.llm.tools._call import call_or_fresh
from retinue.protocol.effects import COORDINATOR_EFFECTS
from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.protocol.paths import MAX_NAME_LENGTH

if TYPE_CHECKING:  # the turn's control, as the layer above it types it
    from retinue.llm.turn._context import TurnContext

__all__ = ["coordinator_tools"]

_Message = Annotated[str, msgspec.Meta(description="The task or message, in full.")]
_TaskName = Annotated[
    str,
    msgspec.Meta(
        pattern="^[a-z0-9_]+$",
        max_length=MAX_NAME_LENGTH,
        description=(
            "Optional short name for the new agent (lowercase letters, digits, _); "
            "it becomes the last part of its path. Unique among your live subagents."
        ),
    ),
]
_Ref = Annotated[
    str,
    msgspec.Meta(description="The agent: a subagent's name or path (as list_agents shows it)."),
]


class SendMessageArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of send_message."""

    to: Annotated[
        str,
        msgspec.Meta(
            description="Recipient: your parent, a subagent or a sibling, by name or path."
        ),
    ]
    message: _Message


class WaitAgentArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of wait_agent."""

    agent: _Ref
    timeout_ms: (
        Annotated[int, msgspec.Meta(ge=0, description="How long to wait, in milliseconds.")] | None
    ) = None


class ListAgentsArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """list_agents takes no arguments."""


class InterruptAgentArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of interrupt_agent."""

    agent: _Ref


class CloseAgentArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of close_agent."""

    agent: _Ref
    recursive: Annotated[
        bool, msgspec.Meta(description="Also close its subagents, children first.")
    ] = False


@functools.lru_cache(maxsize=256)
def _spawn_structs(
    allowed: tuple[str, ...], listing: str, fanout: int
) -> tuple[type[msgspec.Struct], type[msgspec.Struct]]:
    """Return the spawn_subagent and spawn_subagents argument structs for ``allowed``."""
    agent = Annotated[
        Literal[allowed],  # type: ignore[valid-type]
        msgspec.Meta(description=f"Which kind of agent to spawn. Agents you may spawn: {listing}"),
    ]
    single = msgspec.defstruct(
        "spawn_subagent_arguments",
        [
            ("agent", agent),
            ("message", _Message),
            ("task_name", _TaskName | None, None),
            (
                "wait",
                Annotated[
                    bool,
                    msgspec.Meta(
                        description=(
                            "true: wait for the subagent's result; false: return at once, "
                            "its result arrives as a message in a later turn."
                        )
                    ),
                ],
                True,
            ),
        ],
        frozen=True,
        forbid_unknown_fields=True,
    )
    task = msgspec.defstruct(
        "spawn_task",
        [("agent", agent), ("message", _Message), ("task_name", _TaskName | None, None)],
        frozen=True,
        forbid_unknown_fields=True,
    )
    many = msgspec.defstruct(
        "spawn_subagents_arguments",
        [
            (
                "tasks",
                Annotated[
                    list[task],  # type: ignore[valid-type]
                    msgspec.Meta(
                        min_length=1,
                        max_length=fanout,
                        description=f"1 to {fanout} subagents to run at once.",
                    ),
                ],
            )
        ],
        frozen=True,
        forbid_unknown_fields=True,
    )
    return single, many


def _completion(result: Completion) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": result.path,
        "status": str(result.status),
        "output": result.output,
    }
    if result.error is not None:
        out["error"] = result.error
    return out


def _event(event: Message | Completion) -> dict[str, Any]:
    if isinstance(event, Completion):
        return {"event": "completion", **_completion(event)}
    if event.kind == "completion" and event.completion is not None:
        return {"event": "completion", **_completion(event.completion)}
    return {"event": "message", "from": event.sender, "content": event.content}


def _agent(info: AgentInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "path": info.path,
        "agent": info.profile,
        "state": str(info.state),
        "turns": info.generation,
    }


class _Coordinator:
    """The coordinator tool handlers of one turn.

    The supervisor lets a turn wait on one child at a time, and a model may
    issue several tool calls at once, so every wait here holds ``_waiting``:
    children still run side by side, only the waits queue.
    """

    def __init__(self, turn: TurnContext, spawn_wait_s: float) -> None:
        self.turn = turn
        self.spawn_wait_s = spawn_wait_s
        self._lock: asyncio.Lock | None = None  # made by the first wait (most turns make none)

    @property
    def _waiting(self) -> asyncio.Lock:
        """The lock every wait of this turn holds (made once, when first asked for)."""
        lock = self._lock
        if lock is None:
            lock = self._lock = asyncio.Lock()
        return lock

    async def _result(self, info: AgentInfo, deadline: float) -> dict[str, Any]:
        """Wait (until ``deadline`` on the loop clock) for the completion of child ``info``.

        Messages the child sends meanwhile are returned with the result.
        """
        loop = asyncio.get_running_loop()
        messages: list[str] = []
        while True:
            remaining = max(0.0, deadline - loop.time())
            try:
                event = await self.turn.wait_async(info.id, remaining)
            except WaitTimeout:
                out: dict[str, Any] = {
                    "path": info.path,
                    "status": "running",
                    "error": f"no result within {self.spawn_wait_s:g}s; {info.path} keeps "
                    "running: wait_agent for it later, or interrupt_agent",
                }
                break
            if isinstance(event, Completion):
                out = _completion(event)
                break
            if event.kind == "completion" and event.completion is not None:
                out = _completion(event.completion)
                break
            messages.append(event.content)
        if messages:
            out["messages"] = messages
        return out

    async def _spawn(self, agent: str, message: str, task_name: str | None, key: str) -> AgentInfo:
        """Spawn one child of this turn, with the call's idempotency ``key``.

        A bad ``task_name`` (``root``, which the schema's pattern lets by) is
        refused under the tool's own argument name.

        Raises:
            everything ``turn.spawn_async`` raises.
        """
        info: AgentInfo = await self.turn.spawn_async(
            agent, message, name=task_name, idempotency_key=key, name_field="task_name"
        )
        return info

    async def spawn_subagent(self, args: Any) -> dict[str, Any]:
        call = call_or_fresh("spawn_subagent")
        if args.wait and not call.in_doubt and not self._waiting.locked():
            async with self._waiting:  # free: taken at once, the spawn is not held back
                return await self._run_one(args, call.idempotency_key)
        info = await self._spawn(args.agent, args.message, args.task_name, call.idempotency_key)
        if call.in_doubt:
            return _again(info)
        if not args.wait:
            return {"dispatched": True, "path": info.path}
        async with self._waiting:
            deadline = asyncio.get_running_loop().time() + self.spawn_wait_s
            return await self._result(info, deadline)

    async def _run_one(self, args: Any, key: str) -> dict[str, Any]:
        """Spawn the child and wait for its result in one command (a one-child batch).

        The result is the one the spawn and its waits give (:meth:`_result`):
        a refused spawn or a child closed with nothing left raises its error,
        a child still running past ``spawn_wait_s`` is ``"status": "running"``,
        and the messages it sent meanwhile come with it.
        """
        answer, sent = await self.turn.run_one_async(
            args.agent,
            args.message,
            name=args.task_name,
            idempotency_key=key,
            timeout=self.spawn_wait_s,
            name_field="task_name",
        )
        if isinstance(answer, WaitTimeout) and answer.path is not None:
            out = self._batch_entry(args.agent, answer)
        elif isinstance(answer, RetinueError):
            raise answer
        else:
            out = _completion(answer)
        messages = [m.content for m in sent]
        if messages:
            out["messages"] = messages
        return out

    async def spawn_subagents(self, args: Any) -> dict[str, Any]:
        """Run the batch as one ``run_many``: one command spawns it and waits for it all.

        A refused entry keeps its place as ``{"agent", "error"}``; a child still
        running when the shared wait runs out as ``{"path", "status": "running",
        "error"}``; messages the children send meanwhile reach the next turn.
        Each entry's spawn carries ``<call key>.<index>``; run again after a
        crash, the batch is spawned (found) without a wait.
        """
        call = call_or_fresh("spawn_subagents")
        tasks = list(args.tasks)
        keys = [f"{call.idempotency_key}.{i}" for i in range(len(tasks))]
        if call.in_doubt:
            requests = [
                SpawnRequest(t.agent, t.message, t.task_name, "task_name", idempotency_key=k)
                for t, k in zip(tasks, keys, strict=True)
            ]
            made = await self.turn.request_async(SpawnMany(self.turn.ref, requests))
            again = [self._again_entry(t.agent, a) for t, a in zip(tasks, made, strict=True)]
            return {"results": again}
        batch: list[BatchRequest] = [(t.agent, t.message, t.task_name) for t in tasks]
        async with self._waiting:
            done = await self.turn.run_many_async(
                batch, timeout=self.spawn_wait_s, name_field="task_name", keys=keys
            )
        results = [self._batch_entry(t.agent, a) for t, a in zip(tasks, done, strict=True)]
        return {"results": results}

    def _again_entry(self, agent: str, made: AgentInfo | RetinueError) -> dict[str, Any]:
        """One place of a batch spawned again after a crash: its child, or its refusal."""
        if isinstance(made, AgentInfo):
            return _again(made)
        return self._batch_entry(agent, made)

    def _batch_entry(self, agent: str, answer: Completion | RetinueError) -> dict[str, Any]:
        """One place of a batch's results: a completion, a refusal, a child still running."""
        if isinstance(answer, Completion):
            return _completion(answer)
        if isinstance(answer, WaitTimeout) and answer.path is not None:
            return {
                "path": answer.path,
                "status": "running",
                "error": f"no result within {self.spawn_wait_s:g}s; {answer.path} keeps "
                "running: wait_agent for it later, or interrupt_agent",
            }
        path = getattr(answer, "path", None)
        return (
            {"path": path, "error": str(answer)} if path else {"agent": agent, "error": str(answer)}
        )

    async def send_message(self, args: SendMessageArgs) -> dict[str, Any]:
        key = call_or_fresh("send_message").idempotency_key
        sent: Message = await self.turn.send_async(args.to, args.message, dedup_key=key, field="to")
        return {"sent": True, "to": sent.recipient}

    async def wait_agent(self, args: WaitAgentArgs) -> dict[str, Any]:
        timeout = None if args.timeout_ms is None else args.timeout_ms / 1000
        if call_or_fresh("wait_agent").in_doubt:
            timeout = 0.0  # what the lost run took came back as this turn's input
        async with self._waiting:
            try:
                event = await self.turn.wait_async(args.agent, timeout, field="agent")
            except WaitTimeout:
                return {"event": "timed_out", "agent": args.agent, "note": "it keeps running"}
        return _event(event)

    async def list_agents(self, args: ListAgentsArgs) -> dict[str, Any]:
        children: list[AgentInfo] = await self.turn.children_async()
        return {"agents": [_agent(info) for info in children]}

    async def interrupt_agent(self, args: InterruptAgentArgs) -> dict[str, Any]:
        info: AgentInfo = await self.turn.interrupt_async(args.agent, field="agent")
        return {"path": info.path, "state": str(info.state)}

    async def close_agent(self, args: CloseAgentArgs) -> dict[str, Any]:
        if args.recursive:
            infos: list[AgentInfo] = await self.turn.close_tree_async(args.agent, field="agent")
            return {"closed": [info.path for info in infos]}
        info: AgentInfo = await self.turn.close_async(args.agent, field="agent")
        return {"closed": [info.path]}


def _again(info: AgentInfo) -> dict[str, Any]:
    """The result of a spawn run again after a crash: the child its key names, not waited for."""
    return {
        "path": info.path,
        "state": str(info.state),  # the child's state now, not its result
        "note": (
            "this call was in doubt after a restart and was run again with the same key: "
            "this is the child it made; its result arrives as a message"
        ),
    }


def _listing(allowed: Sequence[str], descriptions: Mapping[str, str]) -> str:
    parts = []
    for name in allowed:
        about = descriptions.get(name, "").strip()
        parts.append(f"{name} ({about})" if about else name)
    return ", ".join(parts) + "."


def coordinator_tools(
    turn: TurnContext,
    *,
    allowed: Sequence[str],
    can_spawn: bool,
    fanout_cap: int,
    spawn_wait_s: float,
    wait_default_s: float,
    descriptions: Mapping[str, str] | None = None,
) -> list[ToolDef]:
    """Return the coordinator tools of one turn: all seven when it may spawn, else send_message.

    An agent that may not spawn has no subagents of its own to wait for,
    list, interrupt or close: it is offered ``send_message`` alone (children
    a host placed under it still report to it, as completions in its next
    turn). ``allowed`` is the profiles the agent may spawn (the ``agent`` enum) and
    ``descriptions`` their one-line descriptions for the model. A synchronous
    spawn waits up to ``spawn_wait_s`` for its result (a batch shares it);
    ``wait_default_s`` is what ``wait_agent`` waits without ``timeout_ms``.
    """
    handlers = _Coordinator(turn, spawn_wait_s)
    send = _def(
        "send_message",
        "Send a message to your parent, one of your subagents or a sibling.",
        SendMessageArgs,
        handlers.send_message,
    )
    if not (can_spawn and allowed):
        return [send]
    names = tuple(dict.fromkeys(allowed))
    listing = _listing(names, descriptions or {})
    single, many = _spawn_structs(names, listing, max(1, fanout_cap))
    return [
        _def(
            "spawn_subagent",
            "Start one subagent on a task. With wait=true (the default) you get its "
            f"result; with wait=false it runs while you continue. Agents you may spawn: "
            f"{listing}",
            single,
            handlers.spawn_subagent,
            hint=f"agents you may spawn: {', '.join(names)}",
        ),
        _def(
            "spawn_subagents",
            f"Run 1 to {max(1, fanout_cap)} subagents at once and get their results in "
            "the order given; a refused entry keeps its place as an error. "
            f"Agents you may spawn: {listing}",
            many,
            handlers.spawn_subagents,
            hint=f"agents you may spawn: {', '.join(names)}",
        ),
        send,
        _def(
            "wait_agent",
            "Wait for the next event from one of your subagents: a message it sent you or "
            f"its result (default timeout {wait_default_s:g} s). On timeout it keeps running.",
            WaitAgentArgs,
            handlers.wait_agent,
        ),
        _def(
            "list_agents",
            "List your live subagents with their state.",
            ListAgentsArgs,
            handlers.list_agents,
        ),
        _def(
            "interrupt_agent",
            "Interrupt a subagent's running turn (it ends as interrupted).",
            InterruptAgentArgs,
            handlers.interrupt_agent,
        ),
        _def(
            "close_agent",
            "Close a finished subagent (recursive=true closes its own subagents first).",
            CloseAgentArgs,
            handlers.close_agent,
        ),
    ]


def _def(
    name: str, description: str, args: type[msgspec.Struct], handler: Any, hint: str = ""
) -> ToolDef:
    """A coordinator tool with its effect class (:data:`COORDINATOR_EFFECTS`)."""
    return ToolDef(name, description, args, handler, hint=hint, effect=COORDINATOR_EFFECTS[name])

"""The journal machine's world: an offline model, host tools of each effect class, a ledger.

The model (``retinue/indoubt``, an offline responder on litellm's own call
path, :func:`retinue.llm.model._offline.register_offline_model`) reads its
plan from the task, ``indoubt <tag> steps=<tools>/<tools> ids=<mode>``:
one step of tool calls per ``/``-separated group (``look``, ``credit``,
``refund``, each called with ``order=<tag>``), then the final answer
``done <tag>``. The call ids follow ``ids``: ``fresh`` (unique), ``step``
(one id for every call of a step: the provider repeats an id within a step)
or ``across`` (``c<index>`` in every step: the same ids step after step). It
keeps the last chat each tag sent (:attr:`Ledger.chats`).

The host tools record every run in the :class:`Ledger`, outside the store:
``look`` is ``read``, ``credit`` ``idempotent``, ``refund`` ``unsafe``. Each
run's effect is one :class:`Run` (world, tool, order, key, attempt, in
doubt, ...) and its result names its key and attempt, so the chat shows which
run answered. A tool can be armed to hang (after its effect, or before it)
until the machine crashes the runtime; a crash takes the ledger's lock while
it copies the store and moves to a new *world*, so a run is in the ledger
exactly when its effect happened before the copy: a run of an old world after
the crash does nothing (it is as lost as a killed process's work).
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retinue import Profile, ToolCall
from retinue.llm import LiteLLMRunner, tool
from retinue.llm.model._offline import register_offline_model
from retinue.llm.model._provider import load_litellm

__all__ = [
    "EFFECTS",
    "HANG_S",
    "LEDGER",
    "MODEL",
    "Hang",
    "Ledger",
    "Run",
    "install",
    "profiles",
    "reply",
    "task",
]

MODEL = "retinue/indoubt"
"""The model's name prefix: world ``w`` is served as ``retinue/indoubt<w>``."""
EFFECTS = {"look": "read", "credit": "idempotent", "refund": "unsafe"}
"""The host tools and their effect classes."""
HANG_S = 60.0
"""Hang guard: an armed tool that no crash releases returns after this long."""
_TASK = re.compile(r"^indoubt (\S+) steps=(\S+) ids=(\w+)$")


@dataclass(frozen=True)
class Run:
    """One run of a host tool whose effect happened (in ``world``, before any crash)."""

    world: int
    agent_id: str
    tool: str
    order: str
    key: str
    attempt: int
    in_doubt: bool
    generation: int
    step: int
    index: int
    call_id: str


@dataclass
class Hang:
    """An armed hang: the next run of ``tool`` for ``order`` stops (``before`` its effect,
    or after it) until :attr:`release` is set; :attr:`hung` says it stopped."""

    order: str
    tool: str
    before: bool
    key: str = ""  # the key of the run that hung
    hung: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class Ledger:
    """Every effect of the example, by world; the model's last chat per tag; thread-safe."""

    def __init__(self) -> None:
        """Start empty, in world 0."""
        self.lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Forget everything (a new example)."""
        with self.lock:
            self.world = 0
            self.runs: list[Run] = []
            self.hang: Hang | None = None
            self.chats: dict[str, list[dict[str, Any]]] = {}
            self.model_calls: Counter[str] = Counter()

    def arm(self, order: str, tool_name: str, *, before: bool) -> Hang:
        """Make the next run of ``tool_name`` for ``order`` hang; return the hang."""
        with self.lock:
            self.hang = Hang(order, tool_name, before)
            return self.hang

    def disarm(self) -> None:
        """Release and forget the armed hang, if any."""
        with self.lock:
            hang, self.hang = self.hang, None
        if hang is not None:
            hang.release.set()

    def _hang_for(self, world: int, name: str, order: str, key: str) -> Hang | None:
        with self.lock:
            hang = self.hang
            if hang is None or world != self.world or (hang.tool, hang.order) != (name, order):
                return None
            if hang.hung.is_set():
                return None
            hang.key = key
            hang.hung.set()
            return hang

    def effect(self, world: int, name: str, order: str, call: ToolCall) -> bool:
        """Do ``call``'s effect in ``world`` (hanging if armed); return whether it happened
        (never in a world a crash left)."""
        hang = self._hang_for(world, name, order, call.idempotency_key)
        if hang is not None and hang.before:
            hang.release.wait(HANG_S)
        with self.lock:
            done = world == self.world
            if done:
                self.runs.append(
                    Run(
                        world=world,
                        agent_id=call.agent_id,
                        tool=name,
                        order=order,
                        key=call.idempotency_key,
                        attempt=call.attempt,
                        in_doubt=call.in_doubt,
                        generation=call.generation,
                        step=call.step,
                        index=call.index,
                        call_id=call.call_id,
                    )
                )
        if hang is not None and not hang.before:
            hang.release.wait(HANG_S)  # the effect is done; its result is not committed
        return done

    def runs_of(self, key: str) -> list[Run]:
        """The runs of one call (by its idempotency key), in order."""
        with self.lock:
            return [r for r in self.runs if r.key == key]

    def snapshot(self) -> list[Run]:
        """Every run so far."""
        with self.lock:
            return list(self.runs)


LEDGER = Ledger()


def task(tag: str, steps: Sequence[Sequence[str]], ids: str) -> str:
    """The task that makes the model run ``steps`` (tool names per step) with ``ids``."""
    return f"indoubt {tag} steps={'/'.join('+'.join(s) for s in steps)} ids={ids}"


def _call_id(ids: str, step: int, index: int) -> str:
    if ids == "step":
        return "dup"
    if ids == "across":
        return f"c{index}"
    return f"call_{step}_{index}"


def reply(messages: Sequence[Mapping[str, Any]], world: int) -> dict[str, Any]:
    """The model's answer to a chat (see the module's docstring); keeps the chat if
    ``world`` is the ledger's (an old world's runtime may still call it)."""
    first = next((m for m in messages if m.get("role") == "user"), None)
    found = _TASK.match(str(first.get("content") if first else ""))
    if found is None:
        return {"role": "assistant", "content": "no plan"}
    tag, plan, ids = found.groups()
    with LEDGER.lock:
        if world == LEDGER.world:
            LEDGER.chats[tag] = [dict(m) for m in messages]
            LEDGER.model_calls[tag] += 1
    done = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
    steps = plan.split("/")
    if done >= len(steps):
        return {"role": "assistant", "content": f"done {tag}"}
    calls = [
        {
            "id": _call_id(ids, done + 1, index),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"order": tag})},
        }
        for index, name in enumerate(steps[done].split("+"))
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def install(world: int) -> str:
    """Serve the model of ``world`` in this process (see :data:`MODEL`); return its name.

    The model of the world before stops being served: an old runtime's call
    fails, as a killed process's would never have been made.
    """

    async def respond(model: str, messages: list[Any], optional_params: Mapping[str, Any]) -> Any:
        litellm = load_litellm()  # imported already: the runtime is calling its model
        message = reply(messages, world)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return litellm.ModelResponse(
            model=model,
            choices=[{"index": 0, "finish_reason": finish, "message": message}],
            usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        )

    name = MODEL.split("/", 1)[1]
    if world:
        register_offline_model(f"{name}{world - 1}", None)
    register_offline_model(f"{name}{world}", respond)
    return f"{MODEL}{world}"


def _tools(world: int) -> dict[str, Any]:
    """The host tools of ``world``: each records its run in :data:`LEDGER`."""

    def run(name: str, order: str, call: ToolCall) -> str:
        if not LEDGER.effect(world, name, order, call):
            return "lost with its world"
        return f"{name} {order} key={call.idempotency_key} attempt={call.attempt}"

    def look(order: str, call: ToolCall) -> str:
        """Look an order up (reads only)."""
        return run("look", order, call)

    def credit(order: str, call: ToolCall) -> str:
        """Credit an order (idempotent: the service drops a second run with the same key)."""
        return run("credit", order, call)

    def refund(order: str, call: ToolCall) -> str:
        """Refund an order (unsafe)."""
        return run("refund", order, call)

    return {
        "look": tool(look, effect="read"),
        "credit": tool(credit, effect="idempotent"),
        "refund": tool(refund),
    }


def profiles(world: int) -> list[Profile]:
    """``shop`` (calls in doubt reported) and ``asks`` (``in_doubt="approve"``), their
    tools bound to ``world``."""
    runner = LiteLLMRunner(
        install(world),
        host_tools=_tools(world),
        retries=0,
        request_timeout_s=60,
        tool_timeout_s=2 * HANG_S,
    )
    names = list(EFFECTS)
    return [
        Profile("shop", tools=names, runner=runner),
        Profile("asks", tools=names, runner=runner, in_doubt="approve"),
    ]

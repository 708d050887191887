"""What a fuzzing host does to a runtime: one :class:`Op` at a time, each a line a person reads.

An operation names its target by place, not by id (ids change from run to
run): ``target`` is an index into the top-level agents in the order they were
spawned, or, with ``deep``, into every live agent sorted by path (children the
models spawned included). :func:`apply` runs one operation on a runtime and
returns what happened as a line (``spawn lead -> /root/agent_x``,
``interrupt #1 /root/agent_y: AgentBusy ...``); a refusal (a typed
:class:`~retinue.errors.RetinueError`) is an outcome, not a failure. The host's
waits add what they return to the ledger (:func:`check_invariants`'s
``host_received``). ``reopen`` and ``crash`` are the runner's
(:mod:`retinue.testing._fuzz_run`), not :func:`apply`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from retinue.errors import RetinueError
from retinue.protocol.messages import AgentInfo, AgentState, Completion
from retinue.runtime import Runtime

__all__ = ["AGENT_OPS", "HOST_OPS", "OPS", "Op", "apply", "describe", "lines"]

AGENT_OPS = ("follow_up", "send", "interrupt", "interrupt_tree", "close", "close_tree", "resume")
"""Operations on one agent (named by ``target``/``deep``) that take no value."""
HOST_OPS = (
    "spawn",
    *AGENT_OPS,
    "wait",
    "messages",
    "approvals",
    "settle",
    "pause",
)
"""Operations :func:`apply` runs on an open runtime."""
OPS = (*HOST_OPS, "reopen", "crash")
"""Every operation; ``reopen`` shuts the runtime down and opens it again, ``crash``
SIGKILLs the process running it (then the store is reopened)."""


@dataclass(frozen=True)
class Op:
    """One operation of a fuzzing host.

    ``profile``: what ``spawn`` starts. ``target``/``deep``: which agent (see
    the module docstring). ``value``: seconds (a wait's timeout, a pause, a
    settle's bound, how long a crashed process runs on before the kill) or,
    for ``approvals``, 1 to approve and 0 to deny.
    """

    kind: str
    target: int = 0
    deep: bool = False
    profile: str = ""
    value: float = 0.0

    def __str__(self) -> str:
        """The operation as a person reads it (see :func:`describe`)."""
        return describe(self)


def describe(op: Op) -> str:
    """``spawn lead``, ``interrupt_tree #2``, ``wait #0 (0.5 s)``, ``crash after 0.2 s``..."""
    which = f"{'agent' if op.deep else 'tree'} #{op.target}"
    if op.kind == "spawn":
        return f"spawn {op.profile}"
    if op.kind in ("settle", "pause"):
        return f"{op.kind} {op.value:g} s"
    if op.kind == "crash":
        return f"crash (SIGKILL) after {op.value:g} s, reopen"
    if op.kind == "approvals":
        return "approve every pending call" if op.value else "deny every pending call"
    if op.kind in ("reopen", "messages"):
        return {"reopen": "shut down and reopen", "messages": "read the host's inbox"}[op.kind]
    if op.kind == "wait":
        return f"wait {which} ({op.value:g} s)"
    return f"{op.kind} {which}"


def _target(rt: Runtime, op: Op) -> AgentInfo | None:
    """The agent ``op`` names now, or None if there is none to name."""
    if op.deep:
        live = sorted((a for a in rt.agents() if a.state is not AgentState.CLOSED), key=_path)
        return live[op.target % len(live)] if live else None
    tops = sorted(
        (a for a in rt.agents(include_closed=True) if a.depth == 1),
        key=lambda a: (a.created_at, a.path),
    )
    return tops[op.target % len(tops)] if tops else None


def _path(info: AgentInfo) -> str:
    return info.path


def _one(rt: Runtime, op: Op, info: AgentInfo, number: int, ledger: list[Completion]) -> str:
    """Run an operation on one agent; return what it answered."""
    ref = info.id
    actions: dict[str, Callable[[], object]] = {
        "follow_up": lambda: rt.follow_up(ref, f"follow-up {number}: check again"),
        "send": lambda: rt.send(ref, f"note {number} from the host"),
        "interrupt": lambda: rt.interrupt(ref),
        "interrupt_tree": lambda: rt.interrupt_tree(ref),
        "close": lambda: rt.close(ref),
        "close_tree": lambda: rt.close_tree(ref),
        "resume": lambda: rt.resume(ref),
    }
    if op.kind == "wait":
        completion = rt.wait(ref, timeout=min(op.value, rt.limits.wait_max_s))
        ledger.append(completion)
        return f"got run {completion.generation} {completion.status}"
    answer = actions[op.kind]()
    if isinstance(answer, AgentInfo):
        return f"{answer.state} (run {answer.generation})"
    return "ok"


def apply(rt: Runtime, op: Op, number: int, ledger: list[Completion], *, label: str = "") -> str:
    """Run ``op`` (the ``number``-th of its sequence) on ``rt``; return what happened.

    ``label`` goes into the tasks it gives, so the tasks of one run differ
    from another's (the chaos model's streams follow the tasks).

    Raises:
        ValueError: ``op.kind`` is not one of :data:`HOST_OPS`.
        Exception: anything but a :class:`~retinue.errors.RetinueError` a call
            raised (an untyped error: the caller reports it).
    """
    if op.kind not in HOST_OPS:
        raise ValueError(f"{op.kind!r} is not a host operation: {', '.join(HOST_OPS)}")
    try:
        if op.kind == "spawn":
            spawned = rt.spawn(op.profile, f"task {number} {label}: review what you can")
            return f"-> {spawned.path}"
        if op.kind == "settle":
            rt.wait_idle(min(op.value, rt.limits.wait_max_s))
            return "idle"
        if op.kind == "pause":
            time.sleep(op.value)
            return "ok"
        if op.kind == "messages":
            return f"{len(rt.messages(timeout=0))} messages"
        if op.kind == "approvals":
            return _answer_approvals(rt, bool(op.value))
        info = _target(rt, op)
        if info is None:
            return "no agent to name"
        return f"{info.path}: {_one(rt, op, info, number, ledger)}"
    except RetinueError as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"


def _answer_approvals(rt: Runtime, approve: bool) -> str:
    requests = rt.approvals()
    for request in requests:
        try:
            if approve:
                rt.approve(request.id)
            else:
                rt.deny(request.id, reason="the fuzzing host denies it")
        except RetinueError:
            continue  # answered meanwhile (a timeout, a cancel)
    return f"{len(requests)} answered"


def lines(ops: Sequence[Op], outcomes: Sequence[str]) -> list[str]:
    """Number ``ops`` with their outcomes, one line each (an op not run has none);
    outcomes past the operations (the end of the run) follow as notes."""
    out = []
    for index, op in enumerate(ops):
        tail = f"  => {outcomes[index]}" if index < len(outcomes) else ""
        out.append(f"{index + 1:>3}. {describe(op)}{tail}")
    out += [f"     {note}" for note in outcomes[len(ops) :]]
    return out

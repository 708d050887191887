"""One fuzzing run: a sequence of host operations on a runtime of chaos-model agents, checked.

:func:`run_case` makes a :func:`~retinue.testing._fuzz_workspace.chaos_workspace`
and a store in a work folder, then runs the operations. Those before a
``crash`` run in a child process (:mod:`retinue.testing._fuzz_child`), killed
with SIGKILL once it reaches the crash and ran on for the crash's seconds; the
rest run in this process. Then the runtime settles (a bounded wait), shuts
down within a bound, and everything is checked: the store's invariants
(:func:`~retinue.testing.invariants.check_invariants`, the host's waits as the
ledger), what the shutdowns left (:class:`~retinue.testing.leaks.Leaks`), a
store that reopened with diagnostics after a crash (``restore_diagnostic``),
a host call that raised an untyped error (``untyped_error``) or hung
(``host_call_hung``), and on the live runtime (:mod:`~retinue.testing._fuzz_checks`)
an event that does not encode as JSON (``event_not_encodable``) and an agent
whose turn outlives the runtime's quiescence (``agent_wedged``).

:class:`Setup` says how to open the runtime: a factory ``"module:function"``
called as ``factory(workspace, **args)`` that returns ``Runtime.open``'s
keyword arguments, so a child process builds the same runtime.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from retinue.protocol.messages import Completion
from retinue.runtime import Runtime
from retinue.testing._fuzz_checks import EventCheck, settled, wedged
from retinue.testing._fuzz_ops import Op, apply
from retinue.testing._fuzz_workspace import chaos_workspace
from retinue.testing.chaos import ChaosModel
from retinue.testing.invariants import Broken, check_invariants
from retinue.testing.leaks import Leaks, shutdown_within

__all__ = ["CaseResult", "Setup", "host_op", "open_runtime", "opened", "reopened", "run_case"]

HOST_CALL_BOUND_S = 120.0
"""A host call that has not returned after this (plus its own timeout) has hung."""
CHILD_START_S = 120.0
"""How long a child process may take to open its runtime."""


@dataclass(frozen=True)
class Setup:
    """How a fuzzing run opens its runtime, and its bounds.

    ``factory`` (``"module:function"``) is called as ``factory(workspace,
    **args)`` and returns ``Runtime.open``'s keyword arguments (``profiles``,
    ``limits``, ``team``...); ``args`` must be JSON. ``source``: a folder
    copied into the run's workspace. ``seed`` and ``weights`` make the
    :class:`~retinue.testing.ChaosModel`. ``settle_s`` bounds the wait for
    quiescence at the end, ``shutdown_s`` each shutdown.
    """

    factory: str
    args: Mapping[str, Any] = field(default_factory=dict)
    source: str | None = None
    seed: int = 0
    weights: Mapping[str, float] = field(default_factory=dict)
    settle_s: float = 30.0
    shutdown_s: float = 30.0
    label: str = ""

    def chaos(self) -> ChaosModel:
        """The chaos model of this run."""
        return ChaosModel(self.seed, weights=dict(self.weights))


@dataclass
class CaseResult:
    """What one run found: the broken invariants and what each operation did."""

    broken: list[Broken]
    outcomes: list[str]
    crashes: int = 0
    agents: int = 0


def open_runtime(setup: Setup, store: Path, workspace: Path) -> Runtime:
    """Open the run's runtime on ``store`` with the factory's arguments.

    Raises:
        RetinueError: as ``Runtime.open`` (a bad team, a locked store...).
        ValueError: ``setup.factory`` is not ``"module:function"``.
    """
    module_name, _, name = setup.factory.partition(":")
    if not module_name or not name:
        raise ValueError(f"a fuzzing factory is 'module:function', not {setup.factory!r}")
    factory: Callable[..., Mapping[str, Any]] = getattr(importlib.import_module(module_name), name)
    kwargs = dict(factory(workspace, **setup.args))
    kwargs.setdefault("workspace", workspace)
    return Runtime.open(store, **kwargs)


def _bounded(call: Callable[[], str], seconds: float) -> str | None:
    """Run ``call`` on a daemon thread; its answer, or None if it did not return in time.

    Raises:
        BaseException: whatever ``call`` raised.
    """
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:
            box.append((False, exc))

    thread = threading.Thread(target=run, name="retinue-fuzz-host", daemon=True)
    thread.start()
    thread.join(seconds)
    if not box:
        return None
    ok, value = box[0]
    if not ok:
        raise value
    result: str = value
    return result


def host_op(
    rt: Runtime, op: Op, number: int, ledger: list[Completion], label: str
) -> tuple[str, list[Broken]]:
    """Apply one host operation under a bound; its outcome and what it broke."""
    try:
        outcome = _bounded(
            lambda: apply(rt, op, number, ledger, label=label), op.value + HOST_CALL_BOUND_S
        )
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"[:300]
        return f"raised {text}", [Broken("untyped_error", "", f"op {number}: {text}")]
    if outcome is None:
        return "hung", [Broken("host_call_hung", "", f"op {number} did not return")]
    return outcome, []


def _segments(ops: Sequence[Op]) -> list[list[Op]]:
    """Split ``ops`` after each crash: every segment but the last ends with one."""
    out: list[list[Op]] = [[]]
    for op in ops:
        out[-1].append(op)
        if op.kind == "crash":
            out.append([])
    return out


def _in_child(
    setup: Setup, segment: list[Op], first: int, paths: Mapping[str, Path]
) -> tuple[list[str], list[Completion], list[Broken]]:
    """Run ``segment`` (ending with a crash) in a child process; kill it at the crash."""
    spec = paths["work"] / f"segment-{first}.json"
    acks = paths["work"] / f"acks-{first}.jsonl"
    spec.write_text(
        json.dumps(
            {
                "setup": asdict(setup),
                "ops": [asdict(op) for op in segment],
                "first": first,
                "store": str(paths["store"]),
                "workspace": str(paths["workspace"]),
                "acks": str(acks),
            }
        )
    )
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())
    with (paths["work"] / f"child-{first}.err").open("wb") as errors:
        child = subprocess.Popen(
            [sys.executable, "-m", "retinue.testing._fuzz_child", str(spec)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        try:
            bound = CHILD_START_S + sum(op.value + HOST_CALL_BOUND_S for op in segment)
            entries = _follow(acks, child, time.monotonic() + bound)
            if entries and "crash_point" in entries[-1]:
                time.sleep(segment[-1].value)
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
            child.wait()
    return _from_acks(_read_acks(acks), len(segment))


def _read_acks(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text.splitlines()[: text.count("\n")] if line.strip()]


def _follow(acks: Path, child: subprocess.Popen[bytes], deadline: float) -> list[dict[str, Any]]:
    """Wait until the child reached its crash, exited, or ran past ``deadline``."""
    while True:
        entries = _read_acks(acks)
        last = entries[-1] if entries else {}
        if "crash_point" in last or last.get("outcome") in ("hung", "shutdown hung"):
            return entries
        if child.poll() is not None or time.monotonic() > deadline:
            return entries
        time.sleep(0.02)


def _from_acks(
    entries: list[dict[str, Any]], count: int
) -> tuple[list[str], list[Completion], list[Broken]]:
    outcomes: list[str] = []
    ledger: list[Completion] = []
    broken: list[Broken] = []
    for entry in entries:
        if "outcome" in entry:
            outcomes.append(entry["outcome"])
        for raw in entry.get("received", ()):
            ledger.append(msgspec.convert(raw, Completion))
        if "broken" in entry:
            broken.append(Broken(**entry["broken"]))
    if len(outcomes) < count - 1 and not broken:
        detail = f"the child process stopped after {len(outcomes)} of {count - 1} operations"
        broken.append(Broken("host_call_hung", "", detail))
    outcomes += ["killed"] if len(outcomes) == count - 1 else []
    return outcomes, ledger, broken


def opened(setup: Setup, store: Path, workspace: Path) -> tuple[Runtime, list[Broken]]:
    """Open the run's runtime; what its restore reported (``restore_diagnostic``)."""
    rt = open_runtime(setup, store, workspace)
    return rt, [Broken("restore_diagnostic", "", str(d)) for d in rt.diagnostics]


def reopened(
    rt: Runtime,
    setup: Setup,
    store: Path,
    workspace: Path,
    check: Callable[[], list[Broken]] = list,
) -> tuple[Runtime | None, list[Broken]]:
    """Shut ``rt`` down within the bound, ``check()`` what it left, and open the store again.

    The runtime is None when the shutdown hung (nothing is checked or opened then).
    """
    broken = shutdown_within(rt, setup.shutdown_s)
    if not rt.closed:
        return None, broken
    broken += check()
    again, more = opened(setup, store, workspace)
    return again, broken + more


def _in_process(
    setup: Setup,
    segment: list[Op],
    first: int,
    paths: Mapping[str, Path],
    ledger: list[Completion],
    agents: list[int],
) -> tuple[list[str], list[Broken], bool]:
    """Run the last segment here; settle, shut down, and check what the shutdowns left.

    Returns the outcomes, what broke, and whether the store is free to read;
    ``agents[0]`` becomes the number of agents at the end.
    """
    outcomes: list[str] = []
    leaks = Leaks()
    events = EventCheck()
    try:
        rt, broken = opened(setup, paths["store"], paths["workspace"])
        events.watch(rt)
        for number, op in enumerate(segment, first):
            if op.kind == "reopen":
                again, more = reopened(rt, setup, paths["store"], paths["workspace"], leaks.check)
                broken += more
                if again is None:
                    return [*outcomes, "shutdown hung"], broken + events.take(), False
                rt = again
                events.watch(rt)
                outcomes.append("reopened")
                continue
            outcome, more = host_op(rt, op, number, ledger, setup.label)
            outcomes.append(outcome)
            broken += more
            if outcome == "hung":
                break
        if settled(rt, setup.settle_s):
            broken += wedged(rt, setup.settle_s)
        else:
            outcomes.append(f"(not idle after {setup.settle_s:g} s: shut down while busy)")
        agents[0] = len(rt.agents(include_closed=True))
        broken += shutdown_within(rt, setup.shutdown_s)
        free = rt.closed
        broken += leaks.check() + events.take()
        return outcomes, broken, free
    finally:
        leaks.close()


def run_case(setup: Setup, ops: Sequence[Op], work: Path) -> CaseResult:
    """Run ``ops`` on a fresh store and workspace in ``work`` (an empty folder); check all.

    Raises:
        RetinueError: the runtime does not open (a bad team); ValueError: a bad
            factory or source workspace.
    """
    made = chaos_workspace(work, Path(setup.source) if setup.source else None)
    paths = {"work": work, "store": work / "store", "workspace": made.path}
    ledger: list[Completion] = []
    outcomes: list[str] = []
    broken: list[Broken] = []
    segments = _segments(ops)
    agents = [0]
    with setup.chaos():
        for segment in segments[:-1]:
            done, got, more = _in_child(setup, segment, len(outcomes) + 1, paths)
            outcomes += done
            ledger += got
            broken += more
        last, more, free = _in_process(
            setup, segments[-1], len(outcomes) + 1, paths, ledger, agents
        )
    outcomes += last
    broken += more
    if free:
        broken += check_invariants(
            paths["store"],
            host_received=ledger,
            ledger_complete=len(segments) == 1,
            workspace=made.path,
            forbidden=made.forbidden,
        )
    return CaseResult(broken, outcomes, crashes=len(segments) - 1, agents=agents[0])

"""A perturbed replay of a cassette with crashes: its phases run in child processes.

:func:`crashing_run` replays the recorded run with the perturbations drawn;
a ``"crash"`` perturbation (:mod:`retinue.llm.cassette._perturb`) kills the
process that reaches it with SIGKILL: before a model call is answered, or
after a host tool ran and before its result is recorded. So each phase runs in
a child process (``python -m retinue.testing._fuzz_crash SPEC``): the first
spawns the recorded top-level agent, each after a crash reopens the store and
carries on (resumes the top agent if the crash left it ``interrupted``; a
``"lost"`` restart policy restarts it by itself), until no crash is left to
land. Then this process reopens the store, carries on the same way, waits for
quiescence and checks: the store's invariants
(:func:`~retinue.testing.invariants.check_invariants`: ``journal_out_of_step``
among them), a reopen's diagnostics (``restore_diagnostic``), an agent whose
turn never ends (``agent_wedged``), a host tool call that ended in an error
(``host_tool_failed``; not one a ``"raise"`` perturbation answered) and a
child that failed (``child_failed``).

The runtime is built in each process by a factory ``"module:function"`` called
as ``factory(tape, **args)`` with the perturbed :class:`~retinue.llm.cassette.Cassette`;
it returns ``Runtime.open``'s keyword arguments (``profiles`` with every model
runner on ``tape``, ``workspace``, ``limits``...); ``args`` must be JSON.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from retinue.errors import RetinueError
from retinue.llm.cassette import Cassette, ToolEntry
from retinue.llm.cassette._perturb import INJECTED
from retinue.protocol.messages import AgentState, Event, ToolCallFinished, ToolCallInDoubt
from retinue.runtime import Runtime
from retinue.testing._fuzz_checks import settled, wedged
from retinue.testing._fuzz_faults import FaultModels
from retinue.testing.chaos import CHAOS_MODEL, ChaosModel
from retinue.testing.invariants import check_invariants

__all__ = ["CHILD_BOUND_S", "crashing_run", "main", "team_runtime"]

CHILD_BOUND_S = 300.0
"""The most one phase's child process may run (past it, it is killed: ``child_failed``)."""


def team_runtime(tape: Cassette, *, team: str) -> dict[str, Any]:
    """``Runtime.open`` arguments for the team file ``team`` with every runner on ``tape``
    (``retinue fuzz TEAM --cassette C``'s factory).

    Raises:
        TeamFileError: the team file is unusable.
    """
    from retinue.team import load_team

    loaded = load_team(team)
    profiles = loaded.with_runner_settings(cassette=tape).profiles(runner=lambda turn: "")
    return {"profiles": profiles, "workspace": loaded.workspace, "limits": loaded.limits}


def _factory(name: str) -> Callable[..., Mapping[str, Any]]:
    """The factory ``"module:function"`` names.

    Raises:
        ValueError: it is not ``"module:function"``.
    """
    module_name, _, function = name.partition(":")
    if not module_name or not function:
        raise ValueError(f"a cassette fuzzing factory is 'module:function', not {name!r}")
    found: Callable[..., Mapping[str, Any]] = getattr(
        importlib.import_module(module_name), function
    )
    return found


def _open(spec: Mapping[str, Any], crash: Callable[[str], None] | None) -> Runtime:
    """Open the store with the factory's runtime on the perturbed cassette (crashes
    perturbed only with a ``crash`` hook)."""
    perturb = {k: v for k, v in spec["perturb"].items() if crash is not None or v != "crash"}
    tape = Cassette(
        spec["cassette"],
        "replay",
        replay_tools=False,
        off_script=CHAOS_MODEL,
        perturb=perturb,
        crash=crash,
    )
    kwargs = dict(_factory(spec["factory"])(tape, **spec["args"]))
    return Runtime.open(spec["store"], **kwargs)


def _watch(rt: Runtime, cassette: str, found: Callable[[str], None]) -> None:
    """Report each host tool call that ends in an error: not an injected one, nor one a
    crash left in doubt that was not run again (reported to the model, or to a person)."""
    hosts = {e.tool for e in Cassette(cassette, "replay").entries() if isinstance(e, ToolEntry)}
    doubted: set[str] = set()

    def watch(event: Event) -> None:
        if isinstance(event, ToolCallInDoubt) and event.action != "rerun":
            doubted.add(event.call_id)
        if not isinstance(event, ToolCallFinished) or event.tool not in hosts or event.ok:
            return
        if INJECTED not in (event.error or "") and event.call_id not in doubted:
            found(f"host_tool_failed: {event.tool} ({event.path}): {event.error}")

    rt.subscribe(watch)


def _carry_on(rt: Runtime, spec: Mapping[str, Any], first: bool) -> str:
    """Spawn the recorded top agent (``first``), or resume it if a crash interrupted it;
    return its id."""
    if first:
        return rt.spawn(spec["lead"], spec["task"], name=spec["name"]).id
    tops = [a for a in rt.agents(include_closed=True) if a.depth == 1 and a.name == spec["name"]]
    if not tops:
        return ""
    top = tops[0]
    if top.state is AgentState.INTERRUPTED:
        with contextlib.suppress(RetinueError):  # a restart policy restarted it meanwhile
            rt.resume(top.id)
    return top.id


def main(spec_path: str) -> None:
    """One phase in a child process (see the module docstring); its log gets one JSON line
    per finding (``{"broken": ...}``) and the crash it dies at (``{"crash": key}``)."""
    from retinue.llm.model import load_litellm

    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    log = open(spec["log"], "a", buffering=1)  # noqa: SIM115 - lives until the exit or kill

    def note(**entry: Any) -> None:
        log.write(json.dumps(entry) + "\n")
        log.flush()

    def crash(key: str) -> None:
        note(crash=key)
        os.kill(os.getpid(), signal.SIGKILL)

    load_litellm()  # before the runtime opens
    chaos = ChaosModel(spec["seed"], hang_s=None).install()  # see _fuzz_cassette
    FaultModels(chaos).install()
    rt = _open(spec, crash)
    _watch(rt, spec["cassette"], lambda text: note(broken=text))
    for diagnostic in rt.diagnostics:
        note(broken=f"restore_diagnostic: {diagnostic}")
    _carry_on(rt, spec, spec["first"])
    if not settled(rt, spec["settle_s"]):
        note(broken=f"not_idle: not quiescent after {spec['settle_s']:g} s")
    rt.shutdown()


def _phase(spec: dict[str, Any], work: Path, number: int) -> tuple[int | None, list[str], str]:
    """Run one phase in a child; its exit code (None: killed past the bound), the findings
    it logged and the crash it died at ("" if none)."""
    path = work / f"phase-{number}.json"
    log = work / f"phase-{number}.log"
    path.write_text(json.dumps(dict(spec, log=str(log), first=number == 0)))
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())
    with (work / f"phase-{number}.err").open("wb") as errors:
        child = subprocess.Popen(
            [sys.executable, "-m", "retinue.testing._fuzz_crash", str(path)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        try:
            code: int | None = child.wait(CHILD_BOUND_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            code = None
    text = log.read_text() if log.exists() else ""
    whole = text.splitlines()[: text.count("\n")]  # a line the kill cut short is not read
    lines = [json.loads(x) for x in whole if x.strip()]
    crashed = next((str(e["crash"]) for e in lines if "crash" in e), "")
    broken = [str(e["broken"]) for e in lines if "broken" in e]
    if code is None or (code != 0 and not (crashed and code == -signal.SIGKILL)):
        tail = (work / f"phase-{number}.err").read_text(errors="replace")[-600:]
        broken.append(f"child_failed: phase {number} ended with {code}: {tail}")
    return code, broken, crashed


def crashing_run(
    cassette: str | os.PathLike[str],
    factory: str,
    args: Mapping[str, Any],
    start: tuple[str, str, str],
    *,
    perturb: Mapping[str, str],
    seed: int,
    store: str | os.PathLike[str],
    settle_s: float = 60.0,
) -> tuple[list[str], int]:
    """Replay the cassette's run with ``perturb`` (crashes included) in phases; return what
    broke and how many crashes landed. ``start``: the top agent's profile, name and task.

    Raises:
        CassetteError: the cassette is missing or damaged. RetinueError: the store does not
            open here. ValueError: a bad factory.
    """
    lead, name, task = start
    work = Path(store).parent / f"{Path(store).name}-phases"
    work.mkdir(parents=True, exist_ok=True)
    spec: dict[str, Any] = {
        "cassette": os.fspath(cassette),
        "factory": factory,
        "args": dict(args),
        "lead": lead,
        "name": name,
        "task": task,
        "perturb": dict(perturb),
        "seed": seed,
        "store": os.fspath(store),
        "settle_s": settle_s,
    }
    broken: list[str] = []
    crashes = 0
    while True:
        code, found, crashed = _phase(spec, work, crashes)
        broken += found
        if not crashed or code != -signal.SIGKILL:
            break
        crashes += 1
        spec["perturb"] = {k: v for k, v in spec["perturb"].items() if k != crashed}
        if "crash" not in spec["perturb"].values():
            break
    return broken + _final(spec, crashed != ""), crashes


def _final(spec: dict[str, Any], crashed: bool) -> list[str]:
    """Reopen here, carry on after a crash, settle and check everything."""
    broken: list[str] = []
    with ChaosModel(spec["seed"], hang_s=None) as chaos, FaultModels(chaos):
        rt = _open(spec, None)
        try:
            _watch(rt, spec["cassette"], broken.append)
            broken += [f"restore_diagnostic: {d}" for d in rt.diagnostics]
            if crashed:
                _carry_on(rt, spec, False)
            if settled(rt, spec["settle_s"]):
                broken += [str(b) for b in wedged(rt, spec["settle_s"])]
            else:
                broken.append(f"not_idle: not quiescent after {spec['settle_s']:g} s")
            broken += [str(b) for b in check_invariants(rt)]
        finally:
            rt.shutdown()
    return broken


if __name__ == "__main__":
    main(sys.argv[1])

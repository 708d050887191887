"""The tool-loop fuzzer: random teams of chaos-model agents under a hostile host, checked.

``python -m stress --only fuzz_llm`` (``--quick``: a few seeded cases, CI;
else for ``--soak-seconds``, 600 by default) and ``python -m stress.fuzz_llm
--minutes N --seed S`` for long searches. Each case draws a team
(:func:`random_team`: 2-5 model profiles in a delegation graph, workspace and
host tools within each parent's ceiling, streamed or plain calls, structured results, turn timeouts,
restart policies, approvals, small caps, mailboxes and transcripts, a Python
runner among them), every model agent on the chaos model
(:class:`retinue.testing.ChaosModel`), and a random sequence of host
operations (spawns, follow-ups, messages, interrupts, closes, resumes, waits,
approvals, clean reopens and SIGKILLs of a child process running them); it
runs them with :func:`retinue.testing._fuzz_run.run_case` in a chaos workspace
(a FIFO, symlink loops, links out to a canary) and checks every invariant of
:mod:`retinue.testing.invariants` and :mod:`retinue.testing.leaks`: each
completion received once and shown in its recipient's transcript, no tool
result without its call, no host path or canary in a tool result, nothing
left behind after a shutdown, every shutdown within its bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from retinue import Limits, Profile, Restart, Turn
from retinue.llm import tool
from retinue.llm.model import load_litellm
from retinue.protocol.effects import EFFECTS, IN_DOUBT_MODES
from retinue.testing._fuzz_ops import OPS, Op, lines
from retinue.testing._fuzz_run import Setup, run_case
from stress.parts import Options, Part, Result

__all__ = ["PART", "random_ops", "random_team", "search"]

FACTORY = "stress.fuzz_llm:random_team"
TOOLS = ("read_file", "list_dir", "grep", "find", "write_file", "edit_file", "bash")


@tool(timeout_s=5)
def echo_tool(text: str) -> dict[str, str]:
    """Echo a text back.

    Args:
        text: what to echo.
    """
    return {"echo": text}


@tool(timeout_s=0.3)
def slow_tool(seconds: float = 1.0) -> str:
    """Sleep for a while (past this tool's own timeout).

    Args:
        seconds: how long.
    """
    time.sleep(min(max(seconds, 0.0), 1.0))
    return "slept"


@tool
async def quitting_tool(code: int = 0) -> str:
    """Leave the process (a host tool that raises SystemExit).

    Args:
        code: the exit code.
    """
    await asyncio.sleep(0)
    raise SystemExit(code)


@tool
def odd_tool(kind: str = "surrogate") -> Any:
    """Answer with something awkward: half an emoji, a huge text, a value that is not JSON.

    Args:
        kind: surrogate, huge or object.
    """
    if kind == "huge":
        return "x" * 200_000
    if kind == "object":
        return {"value": object()}
    return "half an emoji \ud83d"


HOST_TOOLS = {t.name: t for t in (echo_tool, slow_tool, quitting_tool, odd_tool)}


def python_worker(turn: Turn) -> str:
    """A Python leaf among the model agents: answers, sometimes fails."""
    rng = random.Random(f"{turn.agent.id}:{turn.agent.generation}")
    if rng.random() < 0.2:
        raise RuntimeError("the python worker failed on purpose")
    time.sleep(rng.uniform(0, 0.05))
    return f"python worker {turn.agent.generation} saw {len(turn.messages)} messages"


def _graph(rng: random.Random, names: list[str]) -> dict[str, list[str]]:
    """Each profile may spawn some later ones (a DAG rooted at the first)."""
    edges: dict[str, list[str]] = {name: [] for name in names}
    for index, name in enumerate(names[1:], 1):
        for parent in rng.sample(names[:index], rng.randint(1, min(2, index))):
            edges[parent].append(name)
    return edges


def _tools(
    rng: random.Random, names: list[str], edges: dict[str, list[str]]
) -> dict[str, list[str]]:
    """Tools per profile, each child's within every parent's (the capability ceiling)."""
    universe = [*TOOLS, *HOST_TOOLS]
    granted: dict[str, list[str]] = {}
    for name in names:
        parents = [p for p in names if name in edges[p]]
        allowed = set(universe)
        for parent in parents:
            allowed &= set(granted[parent])
        pool = sorted(allowed)
        granted[name] = sorted(rng.sample(pool, rng.randint(0, len(pool)))) if pool else []
    return granted


def _settings(rng: random.Random, tools: list[str]) -> dict[str, Any]:
    return {
        "request_timeout_s": rng.choice((0.5, 1.0)),
        "retries": rng.choice((0, 1, 2, 2, 3)),
        "retry_base_s": 0.01,
        "retry_max_s": 0.3,
        "tool_timeout_s": rng.choice((0.5, 2.0)),
        "max_tool_calls": rng.randint(3, 24),
        "stream": rng.random() < 0.3,  # the answer assembled from its pieces
        "host_tools": {n: HOST_TOOLS[n] for n in tools if n in HOST_TOOLS},
    }


def _side_effects(rng: random.Random, tools: list[str]) -> dict[str, Any]:
    """What a profile does with tool calls in doubt: reported or asked for, and some tools'
    effect classes overridden, so crashes find calls in doubt of every class (drawn from
    a generator of its own: the rest of the team is what the seed made before)."""
    effects = {t: rng.choice(EFFECTS) for t in tools if rng.random() < 0.3}
    return {"in_doubt": rng.choice(IN_DOUBT_MODES), "effects": effects}


def random_team(workspace: Path, *, seed: int) -> dict[str, Any]:
    """``Runtime.open`` arguments of one random team of chaos-model agents (``seed`` decides)."""
    del workspace  # the runner passes it to Runtime.open itself
    rng = random.Random(seed)
    names = [f"p{i}" for i in range(rng.randint(2, 5))]
    edges = _graph(rng, names)
    granted = _tools(rng, names, edges)
    profiles = []
    for name in names:
        tools = granted[name]
        restart = (
            Restart(max_restarts=2, within_s=30, backoff_s=0.05) if rng.random() < 0.2 else None
        )
        gateable = ("bash", "write_file", "echo_tool")  # the chaos model sends half an emoji
        approve = [t for t in tools if t in gateable] if rng.random() < 0.2 else []
        profiles.append(
            Profile(
                name,
                subagents=[*edges[name], *(["py"] if rng.random() < 0.3 else [])],
                model="retinue/chaos",
                tools=tools,
                instructions=f"You are {name}. Work with your tools; delegate when you can.",
                result_format="structured" if rng.random() < 0.3 else None,
                turn_timeout_s=rng.choice((None, None, 3.0, 10.0)),
                wake_on_completion=rng.random() < 0.8,
                restart=restart,
                approve=approve,
                model_settings=_settings(rng, tools),
                **_side_effects(random.Random(f"{seed}-{name}"), tools),
            )
        )
    profiles.append(Profile("py", runner=python_worker))
    limits = Limits(
        depth_cap=len(names) + 1,
        fanout_cap=rng.randint(2, 4),
        max_tree_agents=rng.choice((8, 16, 24)),
        max_active_turns=rng.choice((4, 16)),
        mailbox_capacity=rng.choice((3, 20)),
        transcript_max_bytes=rng.choice((4_096, 16_384, 262_144)),
        wait_default_s=2.0,
        wait_max_s=rng.choice((3.0, 20.0)),
        tokens_per_tree=rng.choice((None, None, 400_000)),
        approval_timeout_s=rng.choice((None, 1.0)),
    )
    return {"profiles": profiles, "limits": limits}


def random_ops(rng: random.Random, profiles: list[str], *, crash: bool, count: int) -> list[Op]:
    """A random sequence of ``count`` host operations, a spawn first (a crash among them
    when ``crash``)."""
    kinds = [k for k in OPS if crash or k != "crash"]
    weights = [
        {"spawn": 5, "pause": 3, "wait": 3, "settle": 2, "crash": 1}.get(k, 1.5) for k in kinds
    ]
    ops = [Op("spawn", profile=profiles[0])]
    while len(ops) < count:
        kind = rng.choices(kinds, weights)[0]
        value = {
            "wait": rng.choice((0.0, 0.5, 2.0)),
            "settle": rng.choice((1.0, 5.0)),
            "pause": rng.choice((0.05, 0.3)),
            "crash": rng.choice((0.0, 0.3, 1.0)),
            "approvals": float(rng.random() < 0.5),
        }.get(kind, 0.0)
        ops.append(
            Op(
                kind,
                target=rng.randint(0, 3),
                deep=rng.random() < 0.5,
                profile=rng.choice(profiles),
                value=value,
            )
        )
    if crash and not any(op.kind == "crash" for op in ops):
        ops.insert(rng.randint(1, len(ops)), Op("crash", value=rng.choice((0.0, 0.3, 1.0))))
    return ops


def _case(seed: int, crash: bool) -> tuple[list[Op], Any]:
    rng = random.Random(seed)
    team = random_team(Path("."), seed=seed)
    names = [p.name for p in team["profiles"] if p.name != "py"]
    ops = random_ops(rng, names, crash=crash, count=rng.randint(3, 12))
    setup = Setup(
        FACTORY, {"seed": seed}, seed=rng.randrange(2**31), label=f"s{seed}", settle_s=20.0
    )
    with tempfile.TemporaryDirectory(prefix="retinue-fuzz-llm-") as tmp:
        return ops, run_case(setup, ops, Path(tmp))


def search(
    seconds: float, seed: int, *, cases: int | None = None, crash_every: int = 3
) -> dict[str, Any]:
    """Run cases ``seed``, ``seed + 1``, ... for ``seconds`` (or ``cases`` of them); the figures.

    Every ``crash_every``-th case has SIGKILLs. A case that breaks an
    invariant is kept whole (its operations and what each did).
    """
    load_litellm()
    started = time.monotonic()
    figures: Counter[str] = Counter()
    problems: list[str] = []
    failing: list[dict[str, Any]] = []
    number = 0
    while (cases is None and time.monotonic() - started < seconds) or (
        cases is not None and number < cases
    ):
        case_seed = seed + number
        ops, result = _case(case_seed, crash=number % crash_every == crash_every - 1)
        number += 1
        figures.update(cases=1, operations=len(ops), crashes=result.crashes, agents=result.agents)
        if result.broken:
            problems += [f"case {case_seed}: {b}" for b in result.broken]
            failing.append(
                {
                    "seed": case_seed,
                    "ops": lines(ops, result.outcomes),
                    "broken": [str(b) for b in result.broken],
                }
            )
        print(
            f"fuzz_llm: case {case_seed}: {len(ops)} ops, {result.agents} agents, "
            f"{result.crashes} crashes, {len(result.broken)} broken"
            + (f": {result.broken[0]}" if result.broken else ""),
            file=sys.stderr,
            flush=True,
        )
    row = {
        **figures,
        "broken": len(problems),
        "minutes": round((time.monotonic() - started) / 60, 1),
    }
    return {"row": row, "problems": problems, "failing": failing[:5]}


def _part(options: Options) -> Result:
    """The fuzzer, seeded: a few cases for CI, else ``--soak-seconds`` (600) of them."""
    if options.quick:
        found = search(0, options.seed, cases=6)
    else:
        found = search(options.soak_seconds or 600.0, options.seed)
    result = Result.row(
        "fuzz_llm: chaos-model teams under a hostile host", found["row"], found["problems"]
    )
    result.data["failing"] = found["failing"]
    return result


PART = Part("fuzz_llm", _part, check=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m stress.fuzz_llm --minutes N --seed S``: a long search; 1 if anything broke."""
    parser = argparse.ArgumentParser(prog="python -m stress.fuzz_llm", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    found = search(args.minutes * 60, args.seed)
    print(json.dumps(found, indent=2))
    return 1 if found["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""``retinue fuzz TEAM``: the team on the chaos model, under a hostile host, checked.

Each example is a sequence of host operations (spawns of the team's agents,
follow-ups, messages, interrupts, closes, resumes, waits, approvals answered,
clean reopens, and with ``--crash`` SIGKILLs of the process running them) on a
fresh store and a copy of the team's workspace (with a FIFO, symlink loops and
links pointing out added), every model agent on ``retinue/chaos``
(:func:`retinue.testing._fuzz_team.chaos_team`) with a seed of its own. After
each example the invariants of :mod:`retinue.testing.invariants` and
:mod:`retinue.testing.leaks` are checked. hypothesis draws the examples and
shrinks a failing one; the shortest failing sequence found is printed with what
each operation did, and with the line that replays it (``--replay``); the exit
code is then 1. Needs hypothesis (``pip install 'retinue[fuzz]'``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from retinue.cli.common import FAILED, OK, UsageError, load_team_file

if TYPE_CHECKING:
    from retinue.actors import Profile
    from retinue.team import Team
    from retinue.testing.fuzzing import CaseResult, Op

__all__ = ["add_fuzz", "cmd_fuzz"]

FACTORY = "retinue.testing._fuzz_team:team_factory"
CASSETTE_FACTORY = "retinue.testing._fuzz_crash:team_runtime"
DEFAULT_CALL_TIMEOUT_S = 1.0
"""Seconds one model call of a fuzzed team may take (the chaos model's hangs end there)."""


@dataclass
class _Search:
    """What the search saw: counts, and every failing example (ops, chaos seed, result)."""

    examples: int = 0
    operations: int = 0
    crashes: int = 0
    agents: int = 0
    failures: list[tuple[list[Op], int, CaseResult]] = field(default_factory=list)


def _check_args(args: argparse.Namespace) -> None:
    if args.examples < 1:
        raise UsageError(f"--examples must be at least 1, not {args.examples}")
    if not 0 <= args.seed < 2**32:
        raise UsageError(f"--seed must be between 0 and 2**32 - 1, not {args.seed}")
    if args.max_ops < 1:
        raise UsageError(f"--max-ops must be at least 1, not {args.max_ops}")
    if not args.call_timeout > 0:
        raise UsageError(f"--call-timeout must be a positive number, not {args.call_timeout}")


def _example(args: argparse.Namespace, team: Team, ops: list[Op], seed: int) -> CaseResult:
    """Run one example on a fresh store and workspace copy."""
    from retinue.testing.fuzzing import Setup, run_case

    source = team.workspace
    setup = Setup(
        factory=FACTORY,
        args={"team": str(Path(args.team).absolute()), "call_timeout_s": args.call_timeout},
        source=str(source) if source is not None and source.is_dir() else None,
        seed=seed,
        label=f"s{seed}",
    )
    with tempfile.TemporaryDirectory(prefix="retinue-fuzz-") as tmp:
        try:
            return run_case(setup, ops, Path(tmp))
        except ValueError as exc:  # a workspace too big to copy
            raise UsageError(str(exc)) from None


def _search(args: argparse.Namespace, team: Team) -> _Search:
    """Run the hypothesis search; every failing example is kept in the result."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st

    from retinue.testing.fuzzing import operations

    found = _Search()
    ops = operations(list(team.agents), lead=team.lead, crash=args.crash, max_ops=args.max_ops)

    @seeded(args.seed)
    @settings(
        max_examples=args.examples,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(ops=ops, chaos_seed=st.integers(0, 2**31 - 1))
    def example(ops: list[Op], chaos_seed: int) -> None:
        result = _example(args, team, ops, chaos_seed)
        found.examples += 1
        found.operations += len(ops)
        found.crashes += result.crashes
        found.agents += result.agents
        _progress(found.examples, result)
        if result.broken:
            found.failures.append((ops, chaos_seed, result))
            raise AssertionError(str(result.broken[0]))

    try:
        example()
    except UsageError:
        raise
    except Exception:  # the failure (or hypothesis's Flaky): reported from ``found``
        if not found.failures:
            raise
    return found


def _progress(number: int, result: CaseResult) -> None:
    mark = f"BROKEN: {result.broken[0]}" if result.broken else "ok"
    print(
        f"retinue fuzz: example {number}: {len(result.outcomes)} operations, "
        f"{result.agents} agents, {result.crashes} crashes: {mark}",
        file=sys.stderr,
        flush=True,
    )


def _replay_text(ops: list[Op], seed: int) -> str:
    """The ``--replay`` argument of one example (the operations' fields that are set)."""
    from retinue.testing.fuzzing import Op

    defaults = asdict(Op(""))
    shown = [{k: v for k, v in asdict(op).items() if k == "kind" or v != defaults[k]} for op in ops]
    return json.dumps({"seed": seed, "ops": shown}, separators=(",", ":"))


def _replayed(text: str) -> tuple[list[Op], int]:
    """Read a ``--replay`` argument (the JSON ``retinue fuzz`` printed, or a file holding it).

    Raises:
        UsageError: it is not such an example.
    """
    from retinue.testing.fuzzing import OPS, Op

    raw = Path(text).read_text() if not text.lstrip().startswith("{") else text
    try:
        data = json.loads(raw)
        ops = [Op(**entry) for entry in data["ops"]]
        seed = int(data["seed"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--replay takes the example retinue fuzz printed: {exc}") from None
    unknown = [op.kind for op in ops if op.kind not in OPS]
    if unknown or not ops:
        raise UsageError(f"--replay: unknown operations {unknown}; the operations: {OPS}")
    return ops, seed


def _show(args: argparse.Namespace, ops: list[Op], seed: int, result: CaseResult) -> None:
    from retinue.testing.fuzzing import lines

    print(f"failing sequence ({len(ops)} operations, chaos seed {seed}; what each did):")
    for line in lines(ops, result.outcomes):
        print(f"  {line}")
    print("broken:")
    for broken in result.broken[:20]:
        print(f"  {broken}")
    if len(result.broken) > 20:
        print(f"  ... and {len(result.broken) - 20} more")
    print(f"replay: retinue fuzz {args.team} --replay '{_replay_text(ops, seed)}'")


def _report(args: argparse.Namespace, found: _Search, seconds: float) -> int:
    figures = (
        f"{found.examples} examples, {found.operations} operations, {found.agents} agents, "
        f"{found.crashes} crashes, {seconds:.0f} s (seed {args.seed})"
    )
    if not found.failures:
        print(f"{args.team}: no invariant broken: {figures}")
        return OK
    ops, seed, result = min(found.failures, key=lambda f: (len(f[0]), len(f[2].broken)))
    print(f"{args.team}: invariants broken ({figures}); the shortest failing example:")
    _show(args, ops, seed, result)
    return FAILED


def cmd_fuzz(args: argparse.Namespace) -> int:
    """``retinue fuzz TEAM [--seed N] [--examples N] [--crash] [--replay EXAMPLE]``."""
    _check_args(args)
    replay = _replayed(args.replay) if args.replay else None
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        if replay is None:
            raise UsageError(
                "retinue fuzz needs hypothesis: pip install 'retinue[fuzz]' (or hypothesis)"
            ) from None
    team = load_team_file(args.team, None)
    team.profiles(runner=lambda turn: "")  # every check of the file before the first example
    from retinue.llm.model import load_litellm

    load_litellm()
    started = time.monotonic()
    if args.cassette is not None:
        return _seeded(args, team)
    if replay is not None:
        result = _example(args, team, *replay)
        if not result.broken:
            print(f"{args.team}: the example broke no invariant this time")
            return OK
        _show(args, *replay, result)
        return FAILED
    return _report(args, _search(args, team), time.monotonic() - started)


def _seeded(args: argparse.Namespace, team: Team) -> int:
    """``--cassette C``: search perturbations of the recorded run (or run ``--perturb``'s)."""
    from retinue.llm.cassette import Cassette
    from retinue.testing.fuzzing import (
        Finding,
        load_example,
        perturbed_run,
        seeded_search,
    )

    if not Path(args.cassette).is_file():
        raise UsageError(f"--cassette {args.cassette}: no such cassette; record one with --record")

    def profiles(tape: Cassette) -> list[Profile]:
        return team.with_runner_settings(cassette=tape).profiles(runner=lambda turn: "")

    kwargs = {"workspace": team.workspace, "limits": team.limits}
    lead = args.agent or team.lead
    team_arg = {"team": str(Path(args.team).absolute())}
    if args.perturb is not None:
        try:
            perturb, seed = load_example(args.perturb)
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"--perturb takes the example retinue fuzz printed: {exc}") from None
        with tempfile.TemporaryDirectory(prefix="retinue-fuzz-") as tmp:
            finding = perturbed_run(
                args.cassette,
                profiles,
                lead,
                perturb=perturb,
                seed=seed,
                store=Path(tmp) / "store",
                open_kwargs=kwargs,
                factory=CASSETTE_FACTORY if "crash" in perturb.values() or args.crash else None,
                factory_args=team_arg,
            )
        ran = 1
    else:

        def progress(number: int, found: Finding) -> None:
            mark = f"BROKEN: {found.broken[0]}" if found.broken else "ok"
            crashes = f"{found.crashes} crashes: " if found.crashes else ""
            print(f"retinue fuzz: example {number}: {crashes}{mark}", file=sys.stderr, flush=True)

        ran, maybe = seeded_search(
            args.cassette,
            profiles,
            lead,
            examples=args.examples,
            seed=args.seed,
            progress=progress,
            open_kwargs=kwargs,
            factory=CASSETTE_FACTORY if args.crash else None,
            factory_args=team_arg,
        )
        finding = maybe if maybe is not None else Finding({}, 0)
    if not finding.broken:
        crashed = f" ({finding.crashes} crashes)" if finding.crashes else ""
        print(
            f"{args.team}: no invariant broken in {ran} perturbed replays of {args.cassette}"
            + crashed
        )
        return OK
    print(f"{args.team}: broken in a perturbed replay of {args.cassette}")
    print(
        f"perturbed calls (agent#call, agent#tool<call>: how): {dict(finding.perturb)}, "
        f"chaos seed {finding.seed}, {finding.crashes} crashes"
    )
    for broken in finding.broken[:20]:
        print(f"  {broken}")
    print(
        f"replay: retinue fuzz {args.team} --cassette {args.cassette} "
        f"--perturb '{finding.example()}'"
    )
    return FAILED


def add_fuzz(add: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    """Add ``retinue fuzz`` with ``add(name, summary, description)`` (the parser's)."""
    fuzz = add(
        "fuzz",
        "run a team on the chaos model under a hostile host, and check every invariant",
        "Run random sequences of host operations (spawns, follow-ups, messages,\n"
        "interrupts, closes, resumes, waits, reopens; SIGKILLs with --crash) on the\n"
        "team, every model agent on the chaos model retinue/chaos (answers as bad as\n"
        "real providers send), in fresh stores and copies of its workspace. Check that\n"
        "every completion is received once, transcripts keep their shape, no tool\n"
        "result shows a host path, and nothing is left behind after shutdown. Print the\n"
        "shortest failing sequence found. Exit 0: no invariant broken; 1: one was.\n"
        "Needs hypothesis (pip install 'retinue[fuzz]').",
    )
    fuzz.add_argument("team", metavar="TEAM", help="team file (TOML)")
    fuzz.add_argument("--seed", type=int, default=0, help="the search's seed (default: 0)")
    fuzz.add_argument("--examples", type=int, default=25, help="how many examples to run")
    fuzz.add_argument(
        "--crash", action="store_true", help="also SIGKILL the process running them, and reopen"
    )
    fuzz.add_argument(
        "--max-ops", type=int, default=8, metavar="N", help="most host operations in an example"
    )
    fuzz.add_argument(
        "--call-timeout",
        type=float,
        default=DEFAULT_CALL_TIMEOUT_S,
        metavar="S",
        help="seconds one model call may take (the team's request_timeout_s if lower)",
    )
    fuzz.add_argument(
        "--replay",
        metavar="EXAMPLE",
        help="run one example again: the JSON a failure printed (or a file holding it)",
    )
    fuzz.add_argument(
        "--cassette",
        metavar="C",
        help="seed the search with a recorded run (retinue run --record C): replay it with "
        "calls perturbed (chaos answers, repeated tool calls, provider faults, host tools "
        "that raise; with --crash, SIGKILLs at a call and a reopen), host tools run for real",
    )
    fuzz.add_argument(
        "--perturb",
        metavar="EXAMPLE",
        help="with --cassette, run one perturbed replay again (the JSON a failure printed)",
    )
    fuzz.add_argument("--agent", help="with --cassette, the recorded top agent's profile")
    fuzz.set_defaults(handler=cmd_fuzz)

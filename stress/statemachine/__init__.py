"""Stateful property test: a hypothesis state machine drives a live runtime and checks its promises.

The machine opens a runtime with small caps on a real LMDB store and runs
deterministic, fast runners: ``echo`` (settles at once, fails on purpose,
messages its parent or the host's inbox), ``gated`` (blocks on a gate the
machine opens and closes, honouring ``turn.cancelled``), coordinators
``boss`` -> ``lead`` -> ``mid`` that spawn children with ``turn.spawn``,
``turn.run`` and ``turn.run_many``, and two async runners on the runtime's
event loop: ``alead`` (awaits ``spawn_async``, ``run_async``, ``wait_async``
on a child's messages and completion, ``run_many_async``,
``interrupt_tree_async``, a retried keyed spawn, and a blocking call that
must be refused) and ``aecho`` (echo, send_async, an awaited gate). Every
runner logs the turn it saw (its messages) and what it received from waits
and returned, so the model knows which messages and completions each turn
received: the exactly-once ledger counts the receipts of turns that completed
(a turn that failed or was interrupted gave its inputs back: the input rule,
checked by handing them to the agent's next turn) as well as the host's.

Rules: spawn at the top or under any agent (valid and invalid names, permitted,
not permitted and unknown profiles, oversized tasks), send (duplicate and
over-long dedup keys, oversized content, full mailboxes), follow-up, resume,
interrupt, close, close-tree, host waits with tiny timeouts, opening and
closing the gate, making coordinators' wake turns fail (after receiving their
children's completions; the async one with a ``CancelledError`` of its own,
which is a failure, not an interrupt, as is the ``cancel`` task), and reopen
(close the runtime, read the store, open it again).
Also: ``interrupt_tree`` (leaves first, one completion per busy member, no
member woken), and spawns with an ``idempotency_key`` retried (across a
reopen too, under closed parents too): the same agent, never a second.
The race rules (:mod:`stress.statemachine.races`): concurrent host waits,
cancelled ``wait_async`` tasks, close and close-tree racing blocked waits
(threads, and ``wait_async`` tasks some cancelled as the close lands), a sync
and an async runner closing the runtime (the async one from the event loop
while another turn's ``wait_async`` holds a completion it has not received),
an interrupt, interrupt-tree or child close racing an async parent's wait,
the host's inbox (reads, cancelled ``messages_async``, a blocked read a new
agent's message answers, a flood past its capacity), and a drain that checks
the ledgers: every completion id and every host-inbox message is received
exactly once, before and after reopens. The loop races (``loop_race``, at most
twice an example): host threads spawn, run, send and follow up while the
runtime closes, with the event loop free, held by a ``loophold`` turn (so the
turns' starts wait on it), or closed from the loop by that turn; interrupts,
interrupt-trees and closes of turns queued behind the held loop (or racing
its release); and a crash-like close (its Shutdown command fails at a random
change, so nothing is interrupted) while the next turn starts as the loop
closes. Each turn either completed and is received once, or ends interrupted
(failed, unrun, after a failed close) and restartable; nothing busy with
nothing to run it; nothing the host was told lost, nothing it was refused
made. Every runner's start is checked: a turn cancelled before its runner
claimed it never runs; and every close: no runner left inside a turn, no
task the closed loop left pending (asyncio's log, :mod:`~.leftovers`).

Modules: ``data`` (limits, team, the inputs rules draw), ``trace`` (the
example's trace, violations, counters), ``harness`` (what the runners saw,
the gate), ``latches`` (the race rules' events, host calls on threads),
``runners`` and ``coordinators`` (the team's runners), ``model`` (what the
machine knows, judging calls), ``rules`` (the host's calls, by theme),
``races`` (the race rules, by theme), ``leftovers`` (what a closed loop left
behind, from its logs), ``invariants`` (quiescence and the checks after every
step), ``storecheck`` (the closed store against the
model), ``machine`` (the machine, sync and reopen); ``restarts`` is the
restart machine; ``journal`` (with ``journal_world``, ``journal_checks`` and
``journal_run``, its long search) the journal machine; ``retention`` (with
``retention_cut``, its crash seam, and ``retention_run``, its long search) the
retention machine; ``long_search`` is the seeded search both long searches run.

Each call is checked against the model: it succeeds exactly when no rule
forbids it, and otherwise raises one of the typed errors the model allows
(never anything but a ``RetinueError``). After every step the machine waits
for quiescence (event-driven, no sleeps) and checks the invariants listed on
:meth:`RetinueMachine.settled_invariants` and :meth:`RetinueMachine.reopen`.

``run(max_examples, steps, seed)`` is the long search ``python -m stress`` can
call; ``search(minutes, ...)`` (``python -m stress.statemachine --minutes N``)
runs seed after seed for a time budget; ``tests/runtime/test_statemachine.py``
runs the same machine with CI settings. ``--machine journal`` runs the journal
machine instead (:mod:`stress.statemachine.journal`: tool calls in doubt
across crashes, ``tests/runtime/test_journal_machine.py`` in CI), with the
same ``--examples``, ``--steps``, ``--seed`` and ``--minutes``; ``--machine
retention`` the retention machine (:mod:`stress.statemachine.retention`: closes
whose retention removes what they closed, cut by a crash between their commit
and their spread deletes; ``tests/runtime/test_retention_machine.py`` in CI).
"""

from __future__ import annotations

import time
import traceback
from collections import Counter
from collections.abc import Iterable
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import get_state_machine_test

from stress.parts import Options, Part, Result
from stress.statemachine.data import LIMITS
from stress.statemachine.harness import Harness
from stress.statemachine.machine import RetinueMachine
from stress.statemachine.trace import STATS, VIOLATIONS

__all__ = ["COVERED", "LIMITS", "Harness", "RetinueMachine", "ci_settings", "run", "search"]


COVERED = (
    "reopens",
    "spawned_by_runners",
    "turns_wake",
    "turns_resume",
    "interrupted_running",
    "interrupted_starting",
    "closed_busy",
    "dedup_hits",
    "agent_messages",
    "race:concurrent_waits",
    "race:cancelled_wait_async",
    "race:cancelled",
    "race:close_racing_waits",
    "race:runner_closes_runtime",
    "race:drain",
    "turns_async",
    "async_cancelled",
    "async_wait_completions",
    "async_wait_messages",
    "blocking_refused",
    "idempotent_turn_spawns",
    "host_inbox_sent",
    "host_inbox_read",
    "host_send_refused:MailboxFull",
    "host_send_refused:NotPermitted",
    "race:host_messages",
    "race:cancelled_messages_async",
    "race:messages_cancelled",
    "race:host_inbox_wait",
    "interrupt_tree",
    "turn_interrupt_tree",
    "interrupt_tree_busy",
    "idempotent_first",
    "idempotent_retry",
    "race:async_runner_closes_runtime",
    "race:host_loop_busy_at_close",
    "handover_given_back",
    "handover_received",
    "race:interrupt_racing_async_wait",
    "race:flood_host_inbox",
    "race:close_racing_async_waits",
    "race:async_waits_cancelled",
    "interrupt_race_received",
    "interrupt_race_given_back",
    "async_batches",
    "wakes_failed_with_inputs",
    "runners_cancelled_themselves",
    "inputs_handed_on",
    "race:close_racing_turn_starts",
    "race:interrupt_queued_loop_turns",
    "race:failed_close_racing_turn_starts",
    "cancelled_by_failed_close",
    "loop_interrupt:unrun",
    "loop_interrupt:ran",
    "race:remote_cancelled_wait",
    "race:remote_cancelled",
    "race:remote_socket_lease",
    "race:remote_callers_lease",
)
"""What a run reports it reached (``coverage``): rules, race outcomes and runner paths."""


def ci_settings(max_examples: int = 25, steps: int = 30) -> settings:
    """Settings for a short, derandomized run (what the test suite uses).

    No shrinking: a failure is reported at once, as the full program, well
    inside the suite's 60 s watchdog; ``run()`` (``python -m stress``) shrinks.
    """
    return settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def _describe(exc: BaseException) -> list[str]:
    """Return the text of an exception, and of each one inside an exception group."""
    text = ["".join(traceback.format_exception_only(exc)).strip()]
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            text.extend(_describe(inner))
    return text


def run(
    max_examples: int = 200, steps: int = 50, seed: int = 1, *, durability: str = "full"
) -> dict[str, Any]:
    """Search with ``max_examples`` runs of up to ``steps`` steps from ``seed``; return a row.

    The row has the counts of examples, steps, reopens and typed errors the
    runtime raised, the seconds taken, and ``problems``: empty, or the
    falsifying program hypothesis printed and the violated invariant.
    """
    STATS.clear()
    VIOLATIONS.clear()
    RetinueMachine.durability = durability
    config = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        # Shrink, but skip the explain phase: its line tracer slows every replay of a
        # threaded machine many times over, and the violation carries its own trace.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    machine_test = get_state_machine_test(RetinueMachine, settings=config)
    test = hypothesis.seed(seed)(machine_test)
    t0 = time.perf_counter()
    problems: list[str] = []
    flaky_generation = 0
    try:
        test()
    except hypothesis.errors.FlakyStrategyDefinition as exc:
        if VIOLATIONS:
            problems.extend(_describe(exc))
            problems.extend(f"violation seen: {v}" for v in dict.fromkeys(VIOLATIONS))
        else:  # no invariant failed: a rule's draws depended on thread timing (see row)
            flaky_generation += 1
    except Exception as exc:
        problems.extend(_describe(exc))
        problems.extend(f"violation seen: {v}" for v in dict.fromkeys(VIOLATIONS))
    finally:
        RetinueMachine.durability = "full"
    raised = {k.removeprefix("raised:"): v for k, v in sorted(STATS.items()) if k[:7] == "raised:"}
    return {
        "examples": STATS["examples"],
        "steps": STATS["steps"],
        "coverage": {key: STATS[key] for key in COVERED},
        "errors_raised": raised,
        "problems": problems,
        # Hypothesis stopped the seed because one program prefix drew differently twice
        # (preconditions follow the live runtime, whose timing varies); nothing failed.
        "flaky_generation": flaky_generation,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def search(
    minutes: float,
    max_examples: int = 200,
    steps: int = 50,
    seed: int = 1,
    *,
    durability: str = "full",
) -> dict[str, Any]:
    """Run :func:`run` with seeds ``seed``, ``seed + 1``, ... until ``minutes`` have passed.

    Stops at the first seed that finds a problem. Returns one row: the counts
    summed over the seeds run (``seeds`` lists them), and the problems found.
    """
    deadline = time.monotonic() + minutes * 60
    total: dict[str, Any] = {
        "seeds": [],
        "examples": 0,
        "steps": 0,
        "coverage": Counter(),
        "errors_raised": Counter(),
        "problems": [],
        "flaky_generation": 0,
        "seconds": 0.0,
    }
    while True:
        row = run(max_examples, steps, seed, durability=durability)
        total["seeds"].append(seed)
        for key in ("examples", "steps", "seconds", "flaky_generation"):
            total[key] += row[key]
        total["coverage"].update(row["coverage"])
        total["errors_raised"].update(row["errors_raised"])
        total["problems"].extend(row["problems"])
        if row["problems"] or time.monotonic() > deadline:
            break
        seed += 1
    total["coverage"] = dict(total["coverage"])
    total["errors_raised"] = dict(sorted(total["errors_raised"].items()))
    total["seconds"] = round(total["seconds"], 1)
    return total


def _machine_search(
    machine: str, minutes: float, max_examples: int, steps: int, seed: int
) -> dict[str, Any]:
    """Run the journal or retention machine (:mod:`stress.statemachine.journal`,
    :mod:`stress.statemachine.retention`) with ``seed``, then the next seeds until
    ``minutes`` have passed or a problem is found; return one row."""
    from stress.statemachine import journal_run, retention_run

    search_one = journal_run.run if machine == "journal" else retention_run.run
    deadline = time.monotonic() + minutes * 60
    total: dict[str, Any] = {"seeds": [], "examples": 0, "crashes": 0, "counts": Counter()}
    total.update(problems=[], seconds=0.0)
    while True:
        row = search_one(max_examples, steps, seed)
        total["seeds"].append(seed)
        for key in ("examples", "crashes", "seconds"):
            total[key] += row[key]
        total["counts"].update(row["counts"])
        total["problems"].extend(row["problems"])
        if row["problems"] or time.monotonic() > deadline:
            break
        seed += 1
    total["counts"] = dict(sorted(total["counts"].items()))
    total["seconds"] = round(total["seconds"], 1)
    return total


def _main(argv: Iterable[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m stress.statemachine")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--durability", choices=["full", "buffered"], default="full")
    parser.add_argument(
        "--machine",
        choices=["retinue", "journal", "retention"],
        default="retinue",
        help="retinue: the runtime's machine; journal: calls in doubt across crashes; "
        "retention: closes that remove what they closed, cut by crashes",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=0.0,
        help="keep searching with the next seed until this many minutes have passed",
    )
    args = parser.parse_args(None if argv is None else list(argv))
    if args.machine in ("journal", "retention"):
        row = _machine_search(args.machine, args.minutes, args.examples, args.steps, args.seed)
    elif args.minutes > 0:
        row = search(args.minutes, args.examples, args.steps, args.seed, durability=args.durability)
    else:
        row = run(args.examples, args.steps, args.seed, durability=args.durability)
    for key, value in row.items():
        print(f"  {key:<20}  {value}")
    return 1 if row["problems"] else 0


def _part(options: Options) -> Result:
    """The hypothesis state machine over live actors (CI runs it seeded in the tests)."""
    row = run(25 if options.quick else 200, 30 if options.quick else 50, options.seed)
    title = "state machine: hypothesis rules over live actors, with reopen"
    return Result.row(title, row, list(row.pop("problems")))


PART = Part("statemachine", _part, check=True, in_quick=False)

"""A recorded run as a fuzzing seed: replay it, perturbed where hypothesis chooses, and check.

Each example replays the cassette's run (the top-level agent and task it
recorded: :func:`recorded_start`) with some of its calls perturbed
(:mod:`retinue.llm.cassette._perturb`): a model call answered by the chaos
model instead (``"chaos"``, a seed of its own), with the agent's last recorded
tool calls again (``"repeat"``), failing as a provider does (``"rate_limited"``,
``"server_error"``, ``"timeout"``) or answering a malformed tool call
(``"malformed_json"``); a host tool call that raises (``"raise"``); and, given
a factory that builds the runtime in another process, crashes: the process
SIGKILLed before a model call is answered or inside a host tool call (after its
effect, before its record), the store reopened and the run carried on
(:mod:`retinue.testing._fuzz_crash`). From a perturbed call on, that agent's requests
differ from the recording, so the chaos model answers them: the run leaves
the script where hypothesis chose, and nothing reaches a provider. No clock
decides an answer: an off-script call keeps the runner's deadline and the
chaos model's hangs time out at once (``hang_s=None``), so a replay under load
answers as a quiet one does. Host tools run for real (``replay_tools=False``):
a host tool call that ends in an error is a finding (``host_tool_failed``), as
is any broken store invariant
(:func:`~retinue.testing.invariants.check_invariants`). The search shrinks a
failing example to the fewest perturbations; :class:`Finding` says how to
run it again (``retinue fuzz TEAM --cassette C --perturb '<json>'``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retinue.actors import Profile
from retinue.llm.cassette import Cassette, ModelEntry, ToolEntry
from retinue.llm.cassette._perturb import INJECTED, MODEL_PERTURBATIONS, tool_key
from retinue.protocol import paths
from retinue.protocol.messages import Event, ToolCallFinished
from retinue.runtime import Runtime
from retinue.testing._fuzz_crash import crashing_run
from retinue.testing._fuzz_faults import FaultModels
from retinue.testing.chaos import CHAOS_MODEL, ChaosModel
from retinue.testing.invariants import check_invariants

__all__ = ["Finding", "load_example", "perturbed_run", "recorded_start", "seeded_search"]

Profiles = Callable[[Cassette], list[Profile]]
"""Builds the run's profiles with every model runner on the given cassette."""


@dataclass(frozen=True)
class Finding:
    """One example that broke something: its perturbations, chaos seed and what broke."""

    perturb: Mapping[str, str]
    seed: int
    broken: list[str] = field(default_factory=list)
    crashes: int = 0

    def example(self) -> str:
        """The example as JSON (``--perturb``'s argument)."""
        return json.dumps({"seed": self.seed, "perturb": dict(self.perturb)}, sort_keys=True)


def recorded_start(cassette: str | os.PathLike[str]) -> tuple[str, str]:
    """The name and task of the top-level agent the cassette recorded (its first call).

    Raises:
        CassetteError: the cassette is missing or damaged. ValueError: it holds no
            top-level agent's first call.
    """
    for entry in Cassette(os.fspath(cassette), "replay").entries():
        if isinstance(entry, ModelEntry) and entry.index == 0:
            if paths.depth(entry.agent) != 1:
                continue
            users = [m for m in entry.request.get("messages", []) if m.get("role") == "user"]
            if users:
                return paths.name_of(entry.agent), str(users[0].get("content", ""))
    raise ValueError(f"{cassette} holds no top-level agent's first model call")


def perturbed_run(
    cassette: str | os.PathLike[str],
    profiles: Profiles,
    lead: str,
    *,
    perturb: Mapping[str, str],
    seed: int,
    store: str | os.PathLike[str],
    settle_s: float = 60.0,
    open_kwargs: Mapping[str, Any] | None = None,
    factory: str | None = None,
    factory_args: Mapping[str, Any] | None = None,
) -> Finding:
    """Replay the cassette's run on ``profiles`` (``lead``: the top-level agent's profile)
    with ``perturb`` and the chaos model of ``seed``; return what it broke (maybe nothing).

    With ``factory`` (``"module:function"``, called as ``factory(tape, **factory_args)``
    for ``Runtime.open``'s arguments: :mod:`~retinue.testing._fuzz_crash`) the run goes
    through child processes and crash perturbations land; ``profiles`` is not used.

    Raises:
        CassetteError: the cassette is missing or damaged.
        ValueError: a crash perturbation without a ``factory``.
    """
    name, task = recorded_start(cassette)
    if factory is not None:
        found, crashes = crashing_run(
            cassette,
            factory,
            factory_args or {},
            (lead, name, task),
            perturb=perturb,
            seed=seed,
            store=store,
            settle_s=settle_s,
        )
        return Finding(perturb, seed, found, crashes)
    if "crash" in perturb.values():
        raise ValueError("a crash perturbation needs a factory (the run's child processes)")
    tape = Cassette(
        os.fspath(cassette),
        "replay",
        replay_tools=False,
        off_script=CHAOS_MODEL,
        perturb=perturb,
    )
    hosts = {e.tool for e in tape.entries() if isinstance(e, ToolEntry)}
    broken: list[str] = []

    def watch(event: Event) -> None:
        if not isinstance(event, ToolCallFinished) or event.tool not in hosts or event.ok:
            return
        if INJECTED not in (event.error or ""):  # a "raise" perturbation's is expected
            broken.append(f"host_tool_failed: {event.tool} ({event.path}): {event.error}")

    opened = dict(open_kwargs or {})
    chaos = ChaosModel(seed, hang_s=None)  # a hang times out at once: no clock decides
    with chaos, FaultModels(chaos), Runtime.open(store, profiles=profiles(tape), **opened) as rt:
        unsubscribe = rt.subscribe(watch)
        try:
            top = rt.spawn(lead, task, name=name)
            rt.wait(top.id, timeout=settle_s)
            rt.wait_idle(settle_s)
        finally:
            unsubscribe()
        broken += [str(b) for b in check_invariants(rt)]
    return Finding(perturb, seed, broken)


def seeded_search(
    cassette: str | os.PathLike[str],
    profiles: Profiles,
    lead: str,
    *,
    examples: int = 20,
    seed: int = 0,
    max_perturb: int = 3,
    settle_s: float = 60.0,
    progress: Callable[[int, Finding], None] | None = None,
    open_kwargs: Mapping[str, Any] | None = None,
    factory: str | None = None,
    factory_args: Mapping[str, Any] | None = None,
) -> tuple[int, Finding | None]:
    """Search perturbations of the cassette's run (hypothesis, ``seed``, ``examples``);
    return how many examples ran and the smallest failing one (None: none failed).

    Crashes are drawn only with a ``factory`` (see :func:`perturbed_run`).

    Raises:
        CassetteError: the cassette is missing or damaged.
        ImportError: hypothesis is not installed.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st

    choices = _choices(cassette, crashes=factory is not None)
    found: list[Finding] = []
    ran = [0]
    pair = st.sampled_from(sorted(choices)).flatmap(
        lambda key: st.tuples(st.just(key), st.sampled_from(choices[key]))
    )
    perturbations = st.lists(pair, max_size=max_perturb).map(dict)

    @seeded(seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(perturb=perturbations, chaos_seed=st.integers(0, 2**31 - 1))
    def example(perturb: dict[str, str], chaos_seed: int) -> None:
        with tempfile.TemporaryDirectory(prefix="retinue-fuzz-") as tmp:
            finding = perturbed_run(
                cassette,
                profiles,
                lead,
                perturb=perturb,
                seed=chaos_seed,
                store=Path(tmp) / "store",
                settle_s=settle_s,
                open_kwargs=open_kwargs,
                factory=factory,
                factory_args=factory_args,
            )
        ran[0] += 1
        if progress is not None:
            progress(ran[0], finding)
        if finding.broken:
            found.append(finding)
            raise AssertionError(finding.broken[0])

    try:
        example()
    except AssertionError:
        if not found:
            raise
    except Exception:  # hypothesis's Flaky: reported from what was found
        if not found:
            raise
    if not found:
        return ran[0], None
    return ran[0], min(found, key=lambda f: (len(f.perturb), len(f.broken)))


def _choices(cassette: str | os.PathLike[str], *, crashes: bool) -> dict[str, tuple[str, ...]]:
    """Each call the cassette recorded (its perturbation key) and how it may be perturbed."""
    models = tuple(m for m in MODEL_PERTURBATIONS if crashes or m != "crash")
    tools = ("raise", "crash") if crashes else ("raise",)
    out: dict[str, tuple[str, ...]] = {}
    for entry in Cassette(os.fspath(cassette), "replay").entries():
        if isinstance(entry, ModelEntry):
            out[f"{entry.agent}#{entry.index}"] = models
        else:
            out[tool_key(entry.agent, entry.index)] = tools
    return out


def load_example(text: str) -> tuple[dict[str, str], int]:
    """Read a ``--perturb`` argument (a :meth:`Finding.example`).

    Raises:
        ValueError: it is not one.
    """
    data: Any = json.loads(text)
    perturb = {str(k): str(v) for k, v in dict(data["perturb"]).items()}
    return perturb, int(data["seed"])

"""A recorded run as a fuzzing seed: replay it, perturbed where hypothesis chooses, and check.

Each example replays the cassette's run (the top-level agent and task it
recorded: :func:`recorded_start`) with some of its model calls perturbed:
``"chaos"`` answers the call on the chaos model instead (a seed of its own),
``"repeat"`` answers it with the agent's last recorded tool calls again (a
model that repeats itself). From a perturbed call on, that agent's requests
differ from the recording, so the chaos model answers them: the run leaves
the script where hypothesis chose, and nothing reaches a provider. Host tools
run for real (``replay_tools=False``): a host tool call that ends in an error
is a finding (``host_tool_failed``), as is any broken store invariant
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
from retinue.protocol import paths
from retinue.protocol.messages import Event, ToolCallFinished
from retinue.runtime import Runtime
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
) -> Finding:
    """Replay the cassette's run on ``profiles`` (``lead``: the top-level agent's profile)
    with ``perturb`` and the chaos model of ``seed``; return what it broke (maybe nothing).

    Raises:
        CassetteError: the cassette is missing or damaged.
    """
    name, task = recorded_start(cassette)
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
        if isinstance(event, ToolCallFinished) and event.tool in hosts and not event.ok:
            broken.append(f"host_tool_failed: {event.tool} ({event.path}): {event.error}")

    opened = dict(open_kwargs or {})
    with ChaosModel(seed), Runtime.open(store, profiles=profiles(tape), **opened) as rt:
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
) -> tuple[int, Finding | None]:
    """Search perturbations of the cassette's run (hypothesis, ``seed``, ``examples``);
    return how many examples ran and the smallest failing one (None: none failed).

    Raises:
        CassetteError: the cassette is missing or damaged.
        ImportError: hypothesis is not installed.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st

    keys = sorted(
        {
            f"{e.agent}#{e.index}"
            for e in Cassette(os.fspath(cassette), "replay").entries()
            if isinstance(e, ModelEntry)
        }
    )
    found: list[Finding] = []
    ran = [0]
    perturbations = st.dictionaries(
        st.sampled_from(keys), st.sampled_from(("repeat", "chaos")), max_size=max_perturb
    )

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


def load_example(text: str) -> tuple[dict[str, str], int]:
    """Read a ``--perturb`` argument (a :meth:`Finding.example`).

    Raises:
        ValueError: it is not one.
    """
    data: Any = json.loads(text)
    perturb = {str(k): str(v) for k, v in dict(data["perturb"]).items()}
    return perturb, int(data["seed"])

"""Service soak: a host that runs for hours, killed now and then; what drifts per hour.

``python -m stress --only service_soak --minutes N`` runs an asyncio host as
an operator would (:mod:`stress.service_soak.host`): ``--trees`` (50) trees in
flight on one store, half model trees (a lead and three leaves on a model
0.1-0.6 s per call), half async Python trees, each closed when done; the
default limits and retention, durability ``full``, ``rt.compact()`` every
two minutes. The host runs in a child process that the parent SIGKILLs
``--soak-kills`` times (one per 10 minutes by default, all in the first half of
the run, so that the second half is one long life) and restarts; after each
kill and at the end the parent checks the store against what the host
acknowledged (:mod:`stress.service_soak.check`). Every ``--sample-seconds``
(30) the host samples RSS, the store's file and pages, descriptors, threads,
turns/s, turn and spawn latency p50/p99 and the loop's lag
(:mod:`stress.service_soak.sampler`); at the end each series' drift per hour
is printed (:mod:`stress.service_soak.drift`). ``--quick``: one minute, 10
trees, a sample every 5 s, one kill.

A check: anything acknowledged and not stored, a completion handed out twice,
a duplicate spawn, a broken store invariant, a failed call or a life that
died by itself fails the run. Drift is reported, not judged (a minute says
nothing about an hour): the figures are read against the aims of issue 33.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from stress.parts import Options, Part, Result
from stress.service_soak.drift import drift, last_life
from stress.service_soak.lives import run
from stress.service_soak.plan import Plan

__all__ = ["PART", "summary"]


def _shown(row: dict[str, Any]) -> str:
    if row["per_hour"] is None:
        return f"mean {row['mean']}, no slope ({row['samples']} samples)"
    pct = "" if row["pct_per_hour"] is None else f" ({row['pct_per_hour']:+.2f}%/h)"
    return f"mean {row['mean']}, {row['per_hour']:+.3f}/h{pct}, {row['samples']} samples"


def _last(samples: list[dict[str, Any]], life: int, name: str) -> int:
    """A life's running total ``name`` at its last sample."""
    return max((int(s[name]) for s in samples if s["life"] == life), default=0)


def summary(plan: Plan, found: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's headline row and its drift table, from :func:`~stress.service_soak.lives.run`."""
    samples = found["samples"]
    lives = {s["life"] for s in samples}
    last = found["checks"][-1] if found["checks"] else {}
    row = {
        "minutes": round(plan.seconds / 60, 1),
        "trees_in_flight": plan.trees,
        "sample_s": plan.sample_s,
        "lives": len(found["lives"]),
        "kills": sum(1 for life in found["lives"] if life["killed"]),
        "turns_settled": sum(_last(samples, life, "turns") for life in lives),
        "model_calls": found["model_calls"],
        "errors": sum(s["errors"] for s in samples),
        "acknowledged_spawns": last.get("acknowledged_spawns", 0),
        "acknowledged_receipts": last.get("acknowledged_receipts", 0),
        "acknowledged_closes": last.get("acknowledged_closes", 0),
        "trees_finished_after_a_kill": last.get("recovered_trees", 0),
        "spawns_repeated_with_their_key": last.get("repeated_spawns", 0),
        "lost": sum(c["lost"] for c in found["checks"]),
        "received_twice": sum(c["received_twice"] for c in found["checks"]),
        "duplicate_spawns": sum(c["duplicate_spawns"] for c in found["checks"]),
        "broken_invariants": sum(c["broken_invariants"] for c in found["checks"]),
        "open_s": [life["open_s"] for life in found["lives"]],
        "check_s": [c["check_s"] for c in found["checks"]],
        "seconds": found["seconds"],
    }
    return row, drift(samples, plan.warmup_s, plan.life_warmup_s)


def _part(options: Options) -> Result:
    """Run the soak; the acknowledged-versus-stored checks are its verdict."""
    plan = Plan.of(options)
    with tempfile.TemporaryDirectory(prefix="retinue-service-soak-") as tmp:
        found = run(plan, Path(tmp))
    row, table = summary(plan, found)
    problems = list(found["problems"])
    title = "service soak: trees in flight, SIGKILL and reopen, acknowledged versus stored"
    result = Result.row(title, row, problems)
    warm = f"after {plan.warmup_s:.0f} s (store) / {plan.life_warmup_s:.0f} s of each life"
    shown = {name: _shown(series) for name, series in table.items()}
    result.tables.append((f"service soak: drift per hour, {warm}", shown))
    late = last_life(found["samples"], plan.warmup_s)
    if late:
        title = f"service soak: drift per hour of the last life, after {plan.warmup_s:.0f} s of it"
        result.tables.append((title, {name: _shown(series) for name, series in late.items()}))
    result.data |= {"plan": plan.__dict__, "drift": table, "samples": found["samples"]}
    result.data |= {"drift_last_life": late}
    result.data |= {"checks": found["checks"], "lives": found["lives"]}
    return result


PART = Part("service_soak", _part, check=True, in_full=True)

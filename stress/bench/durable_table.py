"""The durable-steps benchmark's tables: one per level, the ratios, where retinue's step goes.

:func:`level_tables` turns the data of :func:`stress.bench.durable_steps.run`
into printable rows (one table per level of concurrency) and the ratios kept
in the JSON: retinue's steps/s against each peer, the best peer and the
fsync floor. A ratio is taken within each repetition (both sides measured
close in time), then the median of the repetitions' ratios is shown with
their range.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from stress.bench.durable_peers import PEERS

__all__ = ["AIM", "AIM_AGENTS", "level_tables", "ratios"]

AIM = 10.0
"""The issue's aim: retinue's steps/s at least this many times the best peer's..."""
AIM_AGENTS = 100
"""...at this many agents at once."""

ORDER = ("fsync", "dbos", "langgraph", "retinue", "retinue_commits_only", "raw_litellm_loop")


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['steps_per_s']:>8.0f} steps/s   p50 {row['p50_ms']:>8.2f} ms"
        f"   p99 {row['p99_ms']:>8.2f} ms   cpu {row['cpu_ms_per_step']:>6.2f} ms/step"
    )


def _ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 2) if theirs else None


def ratios(at: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Ratios of one level: retinue's (and its commits' alone) steps/s against the others."""
    got: dict[str, Any] = {}
    peers = {name: at[name]["steps_per_s"] for name in PEERS if name in at}
    best = max(peers, key=lambda name: peers[name]) if peers else None
    for side in ("retinue", "retinue_commits_only"):
        if side not in at:
            continue
        rate = at[side]["steps_per_s"]
        for theirs in (*PEERS, "fsync"):
            if theirs in at:
                got[f"{side}_vs_{theirs}"] = _ratio(rate, at[theirs]["steps_per_s"])
        if best is not None:
            got[f"{side}_vs_best_peer"] = _ratio(rate, peers[best])
    if best is not None:
        got["best_peer"] = best
    return got


def _combined(per_rep: list[dict[str, Any]]) -> dict[str, Any]:
    """The repetitions' ratios as one: a number's median with its range, a name's most common."""
    got: dict[str, Any] = {}
    for key in dict.fromkeys(key for rep in per_rep for key in rep):
        values = [rep[key] for rep in per_rep if rep.get(key) is not None]
        if not values:
            got[key] = None
        elif all(isinstance(value, float | int) for value in values):
            middle = round(statistics.median(values), 2)
            got[key] = middle if len(values) == 1 else (middle, f"{min(values)}-{max(values)}")
        else:
            got[key] = Counter(values).most_common(1)[0][0]
    return got


def _added(at: dict[str, dict[str, Any]]) -> tuple[float, float] | None:
    """retinue's step latency over the bare litellm loop's (p50, p99 ms), median rows."""
    if "retinue" not in at or "raw_litellm_loop" not in at:
        return None
    ours, raw = at["retinue"], at["raw_litellm_loop"]
    return round(ours["p50_ms"] - raw["p50_ms"], 2), round(ours["p99_ms"] - raw["p99_ms"], 2)


def _where(at: dict[str, dict[str, Any]]) -> str | None:
    """Where one retinue step's CPU goes: the bare litellm loop, the commits, the rest."""
    if not all(name in at for name in ("retinue", "retinue_commits_only", "raw_litellm_loop")):
        return None
    total = at["retinue"]["cpu_ms_per_step"]
    loop = at["raw_litellm_loop"]["cpu_ms_per_step"]
    commits = at["retinue_commits_only"]["cpu_ms_per_step"]
    rest = total - loop - commits
    share = loop / total * 100 if total else 0.0
    return (
        f"{total:.2f} ms: bare litellm loop {loop:.2f} ({share:.0f}%), "
        f"two commits {commits:.2f}, the rest {rest:.2f}"
    )


def _retinue_commits(row: dict[str, Any]) -> str:
    return (
        f"{row['commits']} group commits for {row['llm_step_commands']} LlmStep transitions "
        f"({row['llm_steps_per_commit']} per commit), commit p50 {row.get('commit_p50_ms')} ms"
    )


def _median_of(got: dict[str, Any], key: str) -> float | None:
    ratio = got.get(key)
    return ratio[0] if isinstance(ratio, tuple) else ratio


def _aim(got: dict[str, Any]) -> dict[str, str]:
    """The aim's lines: retinue's journaled step (the commits-only row, what durability
    costs per tool step, as the peers' rows measure it) against the best peer, and where
    the model-driven row stands (bounded by litellm: the bare loop's own ratio)."""
    lines: dict[str, str] = {}
    step = _median_of(got, "retinue_commits_only_vs_best_peer")
    if step is not None:
        met = "met" if step >= AIM else "NOT met"
        lines["aim"] = (
            f"retinue's journaled step (commits only) >= {AIM:g}x the best peer "
            f"at {AIM_AGENTS} agents: {met} ({step:g}x)"
        )
    model = _median_of(got, "retinue_vs_best_peer")
    if model is not None:
        lines["aim_model_driven"] = (
            f"a model-driven step is {model:g}x the best peer: litellm's own CPU bounds it "
            "(the bare litellm loop's row)"
        )
    return lines


def level_tables(data: dict[str, Any]) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """One table per level (every contender's line, the ratios), and the ratios by level."""
    tables: list[tuple[str, dict[str, Any]]] = []
    by_level: dict[str, Any] = {}
    rows: dict[str, list[dict[str, Any]]] = data["rows"]
    for index, level in enumerate(data["levels"]):
        agents, steps, rounds = level["agents"], level["steps_per_agent"], level["rounds"]
        at = {name: rows[name][index] for name in ORDER if name in rows}
        shown: dict[str, Any] = {name: _line(row) for name, row in at.items()}
        reps = [
            {name: data["reps"][name][index][rep] for name in at}
            for rep in range(data["repetitions"])
        ]
        got = _combined([ratios(rep) for rep in reps])
        added = _added(at)
        if added is not None:
            got["retinue_added_over_raw_loop_p50_p99_ms"] = added
        by_level[f"{agents}_agents"] = got
        shown.update(got)
        if agents == AIM_AGENTS:
            shown.update(_aim(got))
        where = _where(at)
        if where is not None:
            shown["retinue_cpu_per_step"] = where
        if "retinue" in at:
            shown["retinue_group_commit"] = _retinue_commits(at["retinue"])
        loads = [row["load_avg_1m_before"] for rep in reps for row in rep.values()]
        shown["load_avg_1m"] = f"{min(loads)}-{max(loads)}" if loads else "?"
        runs = f" x {rounds} rounds" if rounds > 1 else ""
        title = (
            f"durable steps: {agents} agent(s) at once, {steps} tool steps each{runs}, "
            f"median of {data['repetitions']} (every step committed before the next)"
        )
        tables.append((title, shown))
    return tables, by_level

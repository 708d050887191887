"""Drift per hour of the soak's series: least-squares slopes after a warm-up.

The store's series (its file, its pages, the agents it holds) outlive a
kill: their slope is fitted over every sample after the run's warm-up. The
process's series (RSS, threads, descriptors, rates, latencies, loop lag)
start again with each life: their slope is the pooled within-life slope
(each life after its own warm-up, measured from its own means, the sums
added up), so a restart's drop does not read as a trend. Each series gives
its mean, its slope per hour, that slope as a share of the mean (% per
hour) and the samples it rests on.

A life's first minutes are a warm-up of their own (the retained set and the
allocator reach their high-water marks in steps, compaction runs every few
minutes), and the soak's early lives are short: :func:`last_life` fits the
process's series over the last life only, after the run's own warm-up (the
long life the plan leaves at the end), which is the drift a deployment that
stays up sees.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["PROCESS_SERIES", "STORE_SERIES", "drift", "last_life", "slope_per_hour"]

STORE_SERIES = ("file_mib", "pages", "pages_in_use", "pages_free", "agents")
PROCESS_SERIES = (
    "rss_mib",
    "threads",
    "fds",
    "turns_per_s",
    "turn_p50_ms",
    "turn_p99_ms",
    "spawn_p50_ms",
    "spawn_p99_ms",
    "lag_p99_ms",
    "lag_max_ms",
)


def _sums(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(Sxy, Sxx)`` of ``points`` about their own means."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    sxy = sum((t - mean_t) * (v - mean_v) for t, v in points)
    sxx = sum((t - mean_t) ** 2 for t, _ in points)
    return sxy, sxx


def slope_per_hour(groups: Iterable[list[tuple[float, float]]]) -> float | None:
    """The pooled least-squares slope of ``(seconds, value)`` groups, per hour.

    Each group is fitted about its own means and the sums are added (one
    group: the plain slope). None if no group has two distinct times.
    """
    sxy = sxx = 0.0
    for points in groups:
        if len(points) >= 2:
            gxy, gxx = _sums(points)
            sxy, sxx = sxy + gxy, sxx + gxx
    return None if sxx == 0 else 3600.0 * sxy / sxx


def _row(groups: list[list[tuple[float, float]]]) -> dict[str, Any]:
    values = [v for points in groups for _, v in points]
    slope = slope_per_hour(groups)
    mean = sum(values) / len(values) if values else 0.0
    return {
        "mean": round(mean, 2),
        "per_hour": None if slope is None else round(slope, 3),
        "pct_per_hour": None if slope is None or mean == 0 else round(100 * slope / mean, 2),
        "samples": len(values),
    }


def drift(samples: list[dict[str, Any]], warmup_s: float, life_warmup_s: float) -> dict[str, Any]:
    """Each series' drift per hour (see the module docstring), by series name."""
    table: dict[str, Any] = {}
    late = [s for s in samples if s["t"] >= warmup_s]
    for name in STORE_SERIES:
        points = [(s["t"], float(s[name])) for s in late if s.get(name) is not None]
        table[name] = _row([points])
    lives = sorted({s["life"] for s in samples})
    for name in PROCESS_SERIES:
        groups = [
            [
                (s["t"], float(s[name]))
                for s in samples
                if s["life"] == life and s["life_t"] >= life_warmup_s and s.get(name) is not None
            ]
            for life in lives
        ]
        table[name] = _row(groups)
    return table


def last_life(samples: list[dict[str, Any]], warmup_s: float) -> dict[str, Any]:
    """Each process series' drift over the last life, after ``warmup_s`` of that life.

    Empty when the last life has fewer than two samples past its warm-up.
    """
    if not samples:
        return {}
    life = max(s["life"] for s in samples)
    late = [s for s in samples if s["life"] == life and s["life_t"] >= warmup_s]
    if len(late) < 2:
        return {}
    table: dict[str, Any] = {}
    for name in PROCESS_SERIES + STORE_SERIES:
        points = [(s["t"], float(s[name])) for s in late if s.get(name) is not None]
        table[name] = _row([points])
    return table

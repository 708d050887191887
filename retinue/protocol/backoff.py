"""Exponential backoff, capped before it is computed: the one rule behind every retry delay.

Model-call retries (``retinue.llm``), restart policies (``Restart.delay``) and
MCP server restarts all wait ``start * 2**doublings``, capped at ``cap``. The
cap is applied before the power is computed, so the delay is finite for any
count (``2.0 ** 1024`` overflows a float; ``2 ** n`` with a huge ``n`` costs
memory), and a zero or negative start waits nothing.
"""

from __future__ import annotations

import math

__all__ = ["capped_exponential"]


def capped_exponential(start: float, cap: float, doublings: int) -> float:
    """Return ``min(start * 2**doublings, cap)`` without computing a huge power.

    ``doublings`` below 0 count as 0; ``start`` at or below 0 gives 0.0; the
    result is never above ``max(cap, 0.0)``.
    """
    if start <= 0.0 or cap <= 0.0:
        return 0.0
    doublings = max(0, doublings)
    # Both logs are finite (positive finite floats), so is their difference (< 2100).
    if doublings >= math.log2(cap) - math.log2(start):
        return cap
    try:
        return min(math.ldexp(start, doublings), cap)
    except OverflowError:  # rounding at the very top of the float range
        return cap

"""The warning ``validate`` and ``run`` give when a cost budget meets a model nobody prices."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from retinue.protocol.budgets import has_cost_budget

if TYPE_CHECKING:
    from retinue.team import Team

__all__ = ["warn_unpriced"]


def warn_unpriced(team: Team, out: TextIO | None = None) -> list[str]:
    """With a cost budget set, warn (on stderr) about each model litellm does not price.

    Such a model's calls count 0 against ``usd_per_agent`` and ``usd_per_tree``.
    Returns the models warned about (litellm is imported only with a cost budget).
    """
    if not has_cost_budget(team.limits):
        return []
    from retinue.llm.model import unpriced

    models = [m for name in team.agents if (m := team.setting(name, "model")) is not None]
    found = unpriced(models)
    stream = out if out is not None else sys.stderr
    for model in found:
        print(
            f"retinue: warning: litellm's cost map does not price {model}; its calls count "
            "$0 against the cost budget (usd_per_agent / usd_per_tree)",
            file=stream,
        )
    return found

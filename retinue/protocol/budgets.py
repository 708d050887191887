"""Model budgets: tokens and cost per agent and per tree, and what a spent one raises.

``Limits.tokens_per_agent`` / ``usd_per_agent`` bound one agent's model calls
over all its turns; ``tokens_per_tree`` / ``usd_per_tree`` a top-level agent's
whole tree. A budget is spent once what was used reaches it (no further call
is made) and crossed once what was used passes it (the turn that crossed it
fails). Pure rules: the supervisor's call admission and the model runner both
use them.
"""

from __future__ import annotations

from retinue.errors import CostBudgetExceeded, LimitExceeded, TokenBudgetExceeded
from retinue.protocol.limits import Limits
from retinue.protocol.messages import Usage

__all__ = ["budget_error", "has_budget", "has_cost_budget"]


def has_budget(limits: Limits) -> bool:
    """Whether any token or cost budget is set."""
    return (
        limits.tokens_per_agent is not None
        or limits.tokens_per_tree is not None
        or has_cost_budget(limits)
    )


def has_cost_budget(limits: Limits) -> bool:
    """Whether a cost budget (``usd_per_agent`` or ``usd_per_tree``) is set."""
    return limits.usd_per_agent is not None or limits.usd_per_tree is not None


def budget_error(
    limits: Limits, path: str, agent: Usage, tree: Usage, *, before: bool
) -> LimitExceeded | None:
    """Return the error of a spent budget (``before`` a call) or a crossed one (after it).

    None when every budget still has room. Token budgets are checked first.
    """
    tokens = (
        ("tokens_per_agent", limits.tokens_per_agent, agent.total_tokens, path),
        ("tokens_per_tree", limits.tokens_per_tree, tree.total_tokens, None),
    )
    for budget, limit, used, who in tokens:
        if limit is None or (used < limit if before else used <= limit):
            continue
        owner = who or f"the tree of {path}"
        return TokenBudgetExceeded(
            f"{budget} budget of {limit} tokens is spent: {owner} has used {used}; "
            f"raise Limits.{budget} to continue",
            budget=budget,
            limit=limit,
            used=used,
            path=who,
        )
    costs = (
        ("usd_per_agent", limits.usd_per_agent, agent.cost_usd, path),
        ("usd_per_tree", limits.usd_per_tree, tree.cost_usd, None),
    )
    for budget, cap, spent, who in costs:
        if cap is None or (spent < cap if before else spent <= cap):
            continue
        owner = who or f"the tree of {path}"
        return CostBudgetExceeded(
            f"{budget} budget of ${cap:g} is spent: {owner} has used ${spent:.6g}; "
            f"raise Limits.{budget} to continue",
            budget=budget,
            limit=cap,
            used=spent,
            path=who,
        )
    return None

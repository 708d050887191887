"""Token budgets: a turn makes no model call once its agent or its tree has spent its budget.

``Limits.tokens_per_agent`` bounds one agent's model tokens over all its
turns, ``Limits.tokens_per_tree`` a top-level agent's whole tree.
"""

from __future__ import annotations

from retinue.errors import TokenBudgetExceeded
from retinue.protocol.limits import Limits
from retinue.protocol.messages import Usage

__all__ = ["check_token_budgets"]


def check_token_budgets(
    limits: Limits, path: str, agent: Usage, tree: Usage, *, before: bool
) -> None:
    """Refuse a call (``before``) once a budget is reached, or a turn once one is crossed.

    Raises:
        TokenBudgetExceeded: ``tokens_per_agent`` or ``tokens_per_tree`` is spent.
    """
    checks = (
        ("tokens_per_agent", limits.tokens_per_agent, agent.total_tokens, path),
        ("tokens_per_tree", limits.tokens_per_tree, tree.total_tokens, None),
    )
    for budget, limit, used, who in checks:
        if limit is None or (used < limit if before else used <= limit):
            continue
        owner = who or f"the tree of {path}"
        raise TokenBudgetExceeded(
            f"{budget} budget of {limit} tokens is spent: {owner} has used {used}; "
            f"raise Limits.{budget} to continue",
            budget=budget,
            limit=limit,
            used=used,
            path=who,
        )

"""Budgets in a model turn: no call once a budget is spent, and admission while calls fly.

``Limits.tokens_per_agent`` / ``usd_per_agent`` bound one agent's model calls
over all its turns, ``tokens_per_tree`` / ``usd_per_tree`` a top-level agent's
whole tree (the rules are :mod:`retinue.protocol.budgets`'). With a budget
set, every model call is first admitted by the supervisor
(:class:`~retinue.actors.commands.AdmitCall`), which counts the calls of the
tree in flight, so agents calling at once do not overshoot it together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retinue.actors.commands import AdmitCall
from retinue.protocol.budgets import budget_error, has_budget
from retinue.protocol.limits import Limits
from retinue.protocol.messages import Usage

if TYPE_CHECKING:  # the turn's control, as the layer above it types it
    from retinue.llm.turn._context import TurnContext

__all__ = ["admit_call", "check_budgets", "check_token_budgets"]


def check_budgets(limits: Limits, path: str, agent: Usage, tree: Usage, *, before: bool) -> None:
    """Refuse a call (``before``) once a budget is spent, or a turn once one is crossed.

    Raises:
        TokenBudgetExceeded: ``tokens_per_agent`` or ``tokens_per_tree`` is spent.
        CostBudgetExceeded: ``usd_per_agent`` or ``usd_per_tree`` is spent.
    """
    error = budget_error(limits, path, agent, tree, before=before)
    if error is not None:
        raise error


check_token_budgets = check_budgets
"""The name this check had before cost budgets (it checks them too)."""


async def admit_call(turn: TurnContext, agent: Usage, tree: Usage) -> bool:
    """Wait until the supervisor admits one model call of ``turn``; return whether it asked.

    Without a budget the call is admitted at once (no request is made, False).

    Raises:
        TokenBudgetExceeded, CostBudgetExceeded: a budget is spent.
        TurnInterrupted: the turn was interrupted.
    """
    limits = turn.limits
    if not has_budget(limits):
        return False
    check_budgets(limits, turn.agent.path, agent, tree, before=True)
    await turn.request_async(AdmitCall(turn.ref))
    return True

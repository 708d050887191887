"""Budget benchmark: how far 8 agents calling at once overshoot a tree's token budget.

Eight workers of one lead each loop on tool calls of a fixed size (350
tokens, a local OpenAI stub answering after 50 ms) under ``tokens_per_tree =
3000``, until the budget stops them. Measured with the call admission (each
call admitted only while the tree's spend plus the estimate of its calls in
flight stays below the budget) and, as the baseline in the same run, with the
admission switched off (each turn only checks the spend before its own call,
as before). The figure is what the tree spent over the budget, in calls.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from retinue import Limits, Profile, Runtime, Turn
from retinue.llm import LiteLLMRunner
from retinue.testing import OpenAIStub, StubReply, StubRequest
from stress.parts import Options, Part, Result

BUDGET = 3000
CALL = (200, 150)


def _note(text: str) -> str:
    """Take a note."""
    return f"noted {text}"


def _handler(request: StubRequest) -> StubReply:
    call = {
        "id": f"call_{request.number}",
        "type": "function",
        "function": {"name": "note", "arguments": json.dumps({"text": "x"})},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return StubReply(message=message, usage=CALL, delay_s=0.05)


def _lead(turn: Turn) -> str:
    done = turn.run_many([("worker", f"job {n}") for n in range(8)], timeout=120)
    return f"{len(done)} workers"


def _spent(admission: bool) -> int:
    import retinue.llm.turn._session as session
    from retinue.llm.model import admit_call

    async def unchecked(turn: Any, agent: Any, tree: Any) -> bool:
        return False

    session.admit_call = admit_call if admission else unchecked  # type: ignore[attr-defined]
    try:
        with OpenAIStub(_handler) as stub, tempfile.TemporaryDirectory() as tmp:
            worker = LiteLLMRunner(
                "openai/bench", api_base=stub.url, api_key="x", host_tools={"note": _note}
            )
            profiles = [
                Profile("lead", subagents=["worker"], tools=["note"], runner=_lead),
                Profile("worker", tools=["note"], runner=worker),
            ]
            limits = Limits(tokens_per_tree=BUDGET, max_active_turns=16, wait_default_s=120)
            with Runtime.open(Path(tmp) / "s", profiles=profiles, limits=limits) as rt:
                lead = rt.spawn("lead", "fan out")
                rt.wait(lead.id, timeout=120)
                usage = rt.get(lead.id).tree_usage
                return 0 if usage is None else usage.total_tokens
    finally:
        session.admit_call = admit_call  # type: ignore[attr-defined]


def run(reps: int = 3) -> dict[str, Any]:
    """Spend with and without the admission, ``reps`` times each; return the row."""
    with_admission = [_spent(True) for _ in range(reps)]
    without = [_spent(False) for _ in range(reps)]
    call = sum(CALL)
    return {
        "budget_tokens": BUDGET,
        "call_tokens": call,
        "spent_with_admission": with_admission,
        "spent_without_admission": without,
        "overshoot_calls_with": round((max(with_admission) - BUDGET) / call, 2),
        "overshoot_calls_without": round((max(without) - BUDGET) / call, 2),
    }


def _part(options: Options) -> Result:
    row = run(1 if options.quick else 3)
    return Result.row(
        "budgets: 8 agents calling at once under tokens_per_tree, admission on/off", row
    )


PART = Part("budgets", _part)

"""Turn: one model turn's tool loop.

``TurnSession`` runs a turn: it loads the stored transcript, calls the model,
asks approvals for gated calls, runs the tools, stores each step, and ends
with the answer; its settings and the bridge from a sync turn to the loop.

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.llm.turn._session import REPAIR_PROMPT, TurnSession

__all__ = ["REPAIR_PROMPT", "TurnSession"]

"""Turn: one model turn, from the runner the runtime calls to the tool loop.

``LiteLLMRunner`` (``_runner``) is the runner a model agent's turn calls; each
turn is a ``TurnSession`` (``_session``): it loads the stored transcript,
calls the model, asks approvals for gated calls, runs the tools, stores each
step, and ends with the answer; its settings and the bridge to the
supervisor's commands. ``TurnContext`` (``_context``) is what the layer is
typed against (a turn's control); ``check_profiles`` (``_profile_checks``)
runs every check the runtime's open runs on the profiles.

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.llm.turn._context import TurnContext
from retinue.llm.turn._profile_checks import CheckedProfiles, check_profiles
from retinue.llm.turn._runner import LiteLLMRunner, model_runner_factory
from retinue.llm.turn._session import REPAIR_PROMPT, TurnSession

__all__ = [
    "REPAIR_PROMPT",
    "CheckedProfiles",
    "LiteLLMRunner",
    "TurnContext",
    "TurnSession",
    "check_profiles",
    "model_runner_factory",
]

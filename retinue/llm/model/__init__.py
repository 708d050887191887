"""Model: one model call and what surrounds it.

litellm's import (once per process, off the caller's thread), a call with its
deadline, retries and streaming (``complete``, ``CallSettings``), pricing and
usage, budgets checked before a call, litellm's logging finished as the loop
closes, and the offline models (``retinue/scripted``, ``register_offline_model``).

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.llm.model._budgets import admit_call, check_budgets
from retinue.llm.model._calls import CallSettings, complete, usage_of
from retinue.llm.model._limits import LimitedCalls
from retinue.llm.model._litellm_logging import finish_logging_at_close
from retinue.llm.model._offline import register_offline_model
from retinue.llm.model._pricing import unpriced
from retinue.llm.model._provider import (
    SCRIPTED_MODEL,
    load_litellm,
    load_litellm_async,
    preload_litellm,
)
from retinue.llm.model._script import (
    SCRIPTED_PROVIDER,
    count_tokens,
    minimal_result,
    reply_deltas,
    script_reply,
)

__all__ = [
    "SCRIPTED_MODEL",
    "SCRIPTED_PROVIDER",
    "CallSettings",
    "LimitedCalls",
    "admit_call",
    "check_budgets",
    "complete",
    "count_tokens",
    "finish_logging_at_close",
    "load_litellm",
    "load_litellm_async",
    "minimal_result",
    "preload_litellm",
    "register_offline_model",
    "reply_deltas",
    "script_reply",
    "unpriced",
    "usage_of",
]

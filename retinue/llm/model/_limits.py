"""A turn's model calls admitted under the runtime's provider limits.

Each attempt of a model call (a retry asks again) is admitted by the
runtime's gate (:class:`~retinue.actors.admission.Admission`) before it is
sent: its token estimate is its prompt, counted with litellm's token counter
for the model, plus its ``max_tokens`` (else the agent's largest completion
so far); it waits, fairly between top-level trees and weighted by its
profile's ``priority``, until it fits every limit that covers it. Its end is
reported back: the response's usage (which replaces the estimate), or the
failure's status and ``Retry-After`` (a 429 backs the limit off), or nothing
(an interrupt while in flight: the estimate stays counted); with the rate
limits the answer's headers state, 200 or 429 (litellm hands a response's on
in ``_hidden_params["additional_headers"]``, an error's on the exception).

A runner whose model no limit covers asks nothing: :meth:`LimitedCalls.of`
returns None and no token is counted.
"""

from __future__ import annotations

import itertools
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any

from retinue.actors.admission import Admission, CallOwner
from retinue.llm.model._retry import Failure
from retinue.protocol.messages import Usage
from retinue.protocol.provider_limits import (
    ModelCall,
    StatedLimits,
    count_prompt_tokens,
    stated_limits,
)

if TYPE_CHECKING:  # the turn's control, as the layer above it types it
    from retinue.llm.turn._context import TurnContext

__all__ = ["LimitedCalls", "provider_of_model"]

_ids = itertools.count(1)
_providers: dict[str, str | None] = {}
_PROVIDERS_KEPT = 1024


def provider_of_model(litellm: ModuleType, model: str) -> str | None:
    """litellm's provider of a model string without one (``gpt-4o``: ``openai``); cached.

    A model string with a ``provider/`` prefix needs none (None); so does one
    litellm does not know.
    """
    if "/" in model:
        return None
    if model in _providers:
        return _providers[model]
    try:
        provider = str(litellm.get_llm_provider(model)[1]) or None
    except Exception:
        provider = None
    if len(_providers) >= _PROVIDERS_KEPT:
        _providers.clear()
    _providers[model] = provider
    return provider


class LimitedCalls:
    """One turn's model calls through the runtime's gate (see the module docstring)."""

    def __init__(
        self,
        gate: Admission,
        litellm: ModuleType,
        turn: TurnContext,
        model: str,
        kwargs: dict[str, Any],
        provider: str | None,
    ) -> None:
        """Use :meth:`of`."""
        self.gate = gate
        self.litellm = litellm
        self.model = model
        self.api_base: str | None = kwargs.get("api_base")
        max_tokens = kwargs.get("max_tokens", kwargs.get("max_completion_tokens"))
        self.max_tokens = max_tokens if isinstance(max_tokens, int) else None
        self.provider = provider
        agent = turn.agent
        self.agent_id = agent.id
        self.prefix = f"{agent.id}:{agent.generation}:"
        self.tree: str = getattr(turn, "root_id", None) or agent.id
        self.weight = float(getattr(turn.profile, "priority", 1.0))
        self.owner = CallOwner(agent.id, agent.path, model)

    @classmethod
    def of(
        cls, turn: TurnContext, litellm: ModuleType, model: str, kwargs: dict[str, Any]
    ) -> LimitedCalls | None:
        """The admission of ``turn``'s calls of ``model`` (None: no limit covers them)."""
        gate: Admission | None = getattr(turn, "admission", None)
        if gate is None:
            return None
        provider = provider_of_model(litellm, model)
        if not gate.covers(model, kwargs.get("api_base"), provider):
            return None
        return cls(gate, litellm, turn, model, kwargs, provider)

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """The tokens a call of ``messages`` and ``tools`` is admitted with."""
        prompt = count_prompt_tokens(self.litellm, self.model, messages, tools or None)
        return self.gate.estimator.estimate(self.agent_id, prompt, self.max_tokens)

    async def admit(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """Wait until one attempt may be sent; return its call id (for :meth:`ended`).

        Raises:
            ProviderLimitExceeded: its estimate can never fit a covering limit.
        """
        call = ModelCall(
            id=f"{self.prefix}{next(_ids)}",
            tree=self.tree,
            model=self.model,
            api_base=self.api_base,
            tokens=self.estimate(messages, tools),
            weight=self.weight,
            provider=self.provider,
        )
        await self.gate.admit(call, self.owner)
        return call.id

    def answered(self, call_id: str, response: Any) -> None:
        """The attempt ``call_id`` was answered: its usage replaces its estimate."""
        usage = getattr(response, "usage", None)
        spent = Usage(
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        )
        hidden = getattr(response, "_hidden_params", None)
        headers = hidden.get("additional_headers") if isinstance(hidden, dict) else None
        stated = _stated(headers)
        self.gate.release(call_id, spent if usage is not None else None, 200, stated=stated)

    def failed(self, call_id: str, failure: Failure) -> None:
        """The attempt ``call_id`` failed: a 429 backs its limit off (and its Retry-After)."""
        stated = _stated(failure.headers)
        self.gate.release(call_id, None, failure.status, failure.retry_after, stated=stated)

    def abandoned(self, call_id: str) -> None:
        """The attempt ``call_id`` was cut short (an interrupt): its estimate stays counted."""
        self.gate.release(call_id, None, None)


def _stated(headers: Any) -> StatedLimits | None:
    """The rate limits an answer's headers state (litellm's ``llm_provider-`` ones or raw)."""
    return stated_limits(headers, time.time()) if headers else None

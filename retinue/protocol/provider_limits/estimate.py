"""A model call's token estimate: its prompt, plus the completion it may produce.

The estimate a call is admitted with is its prompt tokens (counted with
litellm's token counter for the model: :func:`count_prompt_tokens`) plus
its ``max_tokens`` when set, else the largest completion its agent produced
so far, else :data:`DEFAULT_COMPLETION_TOKENS`. The usage its response
reports then replaces the estimate in the limits' windows
(:meth:`~retinue.protocol.provider_limits.controller.AdmissionController.release`)
and teaches :class:`TokenEstimator` the agent's completions.

litellm is passed in, never imported here (it costs seconds to import: the
caller holds it already, loaded by ``retinue.llm.provider``).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from retinue.errors import InvalidArgument
from retinue.protocol.messages import Usage

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_COMPLETION_TOKENS",
    "TokenEstimator",
    "count_prompt_tokens",
    "rough_tokens",
]

DEFAULT_COMPLETION_TOKENS = 1024
"""The completion assumed for an agent's first call without ``max_tokens``."""
CHARS_PER_TOKEN = 4
"""Characters per token of the rough count used when litellm cannot count."""
_OFFLINE_TOKENIZERS = (None, "anthropic", "deepseek")
# litellm's tokenizers for these models ship with it; the others (llama, cohere)
# are downloaded from the Hugging Face hub on first use: counted with its default.


def rough_tokens(messages: Sequence[Any], tools: Sequence[Any] | None = None) -> int:
    """Return a rough token count of ``messages`` and ``tools``: 4 characters of JSON a token."""
    text = json.dumps([list(messages), list(tools or ())], default=str, ensure_ascii=False)
    return max(1, len(text) // CHARS_PER_TOKEN)


def count_prompt_tokens(
    litellm: ModuleType,
    model: str,
    messages: Sequence[Any],
    tools: Sequence[Any] | None = None,
) -> int:
    """Return the prompt tokens of a call of ``model``, counted by ``litellm.token_counter``.

    A model whose tokenizer litellm would download (llama, cohere) is counted
    with litellm's default encoding instead: no network. If litellm fails to
    count, :func:`rough_tokens` answers. Never raises.
    """
    kind_of = getattr(getattr(litellm, "utils", None), "huggingface_tokenizer_kind", None)
    counted_as = ""
    if callable(kind_of):
        try:
            counted_as = model if kind_of(model) in _OFFLINE_TOKENIZERS else ""
        except Exception:
            counted_as = ""
    try:
        count = litellm.token_counter(
            model=counted_as, messages=list(messages), tools=list(tools) if tools else None
        )
        return max(0, int(count))
    except Exception:
        return rough_tokens(messages, tools)


class TokenEstimator:
    """Each agent's largest completion so far, and the estimate of its next call.

    Keeps at most ``max_agents`` agents (the least recently seen go first).
    One thread at a time.

    Raises:
        InvalidArgument: ``default_completion_tokens`` is negative or
            ``max_agents`` not positive.
    """

    def __init__(
        self,
        default_completion_tokens: int = DEFAULT_COMPLETION_TOKENS,
        max_agents: int = 10_000,
    ) -> None:
        """An estimator that assumes ``default_completion_tokens`` for an agent's first call."""
        if isinstance(default_completion_tokens, bool) or default_completion_tokens < 0:
            raise InvalidArgument(
                f"default_completion_tokens must be >= 0, not {default_completion_tokens!r}"
            )
        if isinstance(max_agents, bool) or max_agents < 1:
            raise InvalidArgument(f"max_agents must be a positive integer, not {max_agents!r}")
        self.default_completion_tokens = default_completion_tokens
        self.max_agents = max_agents
        self._largest: OrderedDict[str, int] = OrderedDict()

    def completion(self, agent: str, max_tokens: int | None = None) -> int:
        """The completion expected of ``agent``'s next call: ``max_tokens``, else its largest."""
        if max_tokens is not None and not isinstance(max_tokens, bool) and max_tokens > 0:
            return int(max_tokens)
        largest = self._largest.get(agent)
        if largest is None:
            return self.default_completion_tokens
        self._largest.move_to_end(agent)
        return largest

    def estimate(self, agent: str, prompt_tokens: int, max_tokens: int | None = None) -> int:
        """The tokens ``agent``'s next call is admitted with: prompt plus expected completion."""
        return max(0, int(prompt_tokens)) + self.completion(agent, max_tokens)

    def observe(self, agent: str, usage: Usage) -> None:
        """Learn from a response's ``usage``: the agent's largest completion so far."""
        completion = usage.completion_tokens
        if completion > self._largest.get(agent, -1):
            self._largest[agent] = completion
        if agent in self._largest:
            self._largest.move_to_end(agent)
        while len(self._largest) > self.max_agents:
            self._largest.popitem(last=False)

    def forget(self, agent: str) -> None:
        """Drop what is known of ``agent`` (it was closed)."""
        self._largest.pop(agent, None)

"""Model tokens and cost spent: :class:`Usage`, summed over calls (published by ``messages``)."""

from __future__ import annotations

import msgspec

__all__ = ["Usage"]


class Usage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Model tokens and cost spent, summed over calls.

    ``cost_usd`` comes from litellm's local cost map; a model it does not
    price counts 0.0.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> Usage:
        """Return the sum of this usage and ``other``."""
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
        )

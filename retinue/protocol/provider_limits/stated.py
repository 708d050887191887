"""What a provider states about its rate limits: the limit, and what remains, in its headers.

A provider that limits requests and tokens per window says so on every
answer, 200s and 429s alike. OpenAI (and the providers that copy it: Groq,
Azure OpenAI, OpenRouter, Cerebras...) sends ``x-ratelimit-limit-requests``,
``x-ratelimit-remaining-requests`` and ``x-ratelimit-reset-requests`` (a
duration: ``1s``, ``6m0s``, ``20ms``), and the same three for ``-tokens``;
Anthropic sends ``anthropic-ratelimit-requests-limit``, ``-remaining`` and
``-reset`` (an RFC 3339 time), and the same for ``-tokens``. litellm hands
them on with an ``llm_provider-`` prefix (a response's
``_hidden_params["additional_headers"]``, an error's response headers);
:func:`stated_limits` reads either spelling, in any case.

A :class:`StatedLimits` is what one answer said. :meth:`StatedLimits.has_room`
tells a 429 of a rate (the requests or the tokens ran out) from one of
something else, such as too many requests at once: a provider that says it
has requests and tokens left did not refuse for the rate.

Pure: no clock is read (an absolute reset time is turned into seconds from
the ``wall`` time passed in), no I/O. A value that does not parse (a negative
count, as Azure sends ``-1`` when it has nothing to say, or a limit of 0) is
left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime

import msgspec

__all__ = ["StatedLimits", "parse_duration", "stated_limits"]

_PREFIX = "llm_provider-"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_MAX_COUNT = 2**62


class StatedLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The rate limits one answer stated (None: it did not say).

    ``*_limit`` is the provider's limit per window, ``*_remaining`` what was
    left of it when the provider answered, ``*_reset_s`` the seconds until the
    window is whole again.
    """

    requests_limit: int | None = None
    requests_remaining: int | None = None
    requests_reset_s: float | None = None
    tokens_limit: int | None = None
    tokens_remaining: int | None = None
    tokens_reset_s: float | None = None

    @property
    def empty(self) -> bool:
        """Whether it states no limit and no remainder at all."""
        return (
            self.requests_limit is None
            and self.requests_remaining is None
            and self.tokens_limit is None
            and self.tokens_remaining is None
        )

    def has_room(self, tokens: int) -> bool | None:
        """Whether it says one more request of ``tokens`` fits the provider's rate (None: it
        states no remainder). False when the requests or the tokens left are too few."""
        requests_left, tokens_left = self.requests_remaining, self.tokens_remaining
        if requests_left is None and tokens_left is None:
            return None
        if requests_left is not None and requests_left < 1:
            return False
        return tokens_left is None or tokens_left >= tokens


def parse_duration(text: str) -> float | None:
    """Seconds in an OpenAI reset duration (``1s``, ``6m0s``, ``1h2m3.5s``, ``20ms``) or a
    plain number of seconds; None when it is neither."""
    text = text.strip().lower()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) and value >= 0 else None
    total, at = 0.0, 0
    for found in _DURATION.finditer(text):
        if found.start() != at:
            return None
        total += float(found.group(1)) * _UNITS[found.group(2)]
        at = found.end()
    return total if at == len(text) and at > 0 else None


def _count(raw: object, least: int = 0) -> int | None:
    try:
        value = int(str(raw).strip())
    except ValueError:
        return None
    return value if least <= value <= _MAX_COUNT else None


def _reset(raw: object, wall: float) -> float | None:
    """Seconds until a reset given as a duration or as an RFC 3339 time (from ``wall``)."""
    text = str(raw).strip()
    seconds = parse_duration(text)
    if seconds is not None:
        return seconds
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - wall)


def stated_limits(headers: Mapping[str, object] | None, wall: float = 0.0) -> StatedLimits | None:
    """Read the rate limits an answer's ``headers`` state (None: they state none).

    ``headers`` are an HTTP answer's, or litellm's with the ``llm_provider-``
    prefix; names are compared without case. ``wall`` is the wall-clock time
    (seconds since the epoch) an absolute reset time is measured from.
    """
    if not headers:
        return None
    found: dict[str, object] = {}
    try:
        items = list(headers.items())
    except (AttributeError, TypeError):
        return None
    for name, value in items:
        key = str(name).lower()
        if key.startswith(_PREFIX):
            key = key[len(_PREFIX) :]
        if key.startswith(("x-ratelimit-", "anthropic-ratelimit-")):
            found.setdefault(key, value)
    if not found:
        return None
    fields: dict[str, int | float | None] = {}
    for what in ("requests", "tokens"):
        for name, part in (("limit", "limit"), ("remaining", "remaining"), ("reset_s", "reset")):
            names = (f"x-ratelimit-{part}-{what}", f"anthropic-ratelimit-{what}-{part}")
            raw = next((found[n] for n in names if n in found), None)
            if raw is None:
                continue
            if name == "reset_s":
                fields[f"{what}_{name}"] = _reset(raw, wall)
            else:  # a limit of 0 would hold every call back for good: not a limit
                fields[f"{what}_{name}"] = _count(raw, least=1 if name == "limit" else 0)
    stated = StatedLimits(**fields)  # type: ignore[arg-type]
    return None if stated.empty else stated

"""Model-call failures: which are worth retrying, how long to wait, and the one-line error.

retinue owns this logic rather than litellm's ``num_retries`` (which silently
needs ``tenacity``) and its ``timeout=`` (not enforced for custom providers).
Retried: timeouts, connection errors (no status) and the statuses in
:data:`RETRYABLE_STATUSES`; anything else (a bad request, a bad key, an
unknown model) fails at once. A ``Retry-After`` (or ``retry-after-ms``)
header is honoured, up to the runner's ``retry_max_s``.
"""

from __future__ import annotations

import email.utils
import logging
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from retinue.protocol.backoff import capped_exponential

__all__ = ["RETRYABLE_STATUSES", "Failure", "backoff_delay", "classify"]

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
"""HTTP statuses a model call is retried on."""

_PREFIX_RE = re.compile(r"^(?:litellm\.)?[A-Za-z]+(?:Error|Exception|Timeout):\s*")


@dataclass(frozen=True)
class Failure:
    """One failed model call, classified."""

    provider: str
    status: int | None
    message: str
    retryable: bool
    retry_after: float | None = None
    headers: Mapping[str, Any] | None = None
    """The failed answer's HTTP headers (None: none), for the rate limits they state."""

    def line(self, attempts: int) -> str:
        """Return the one-line description of the final failure after ``attempts`` calls."""
        status = self.status
        where = f"{self.provider} status {status}" if status is not None else self.provider
        tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
        return f"{where}: {self.message} ({tries})"


_TRACEBACK = "Traceback (most recent call last)"

log = logging.getLogger("retinue.llm")


def _clean(text: str) -> str:
    """One line, no litellm class prefixes, no traceback, at most 300 characters.

    litellm puts a whole Python traceback in some errors' text (an answer it
    could not parse); what a model or an operator sees is the line before it.
    """
    text = str(text)
    if _TRACEBACK in text:
        log.debug("model call error with a traceback: %s", text)
        text = text.split(_TRACEBACK, 1)[0].strip() or "the provider's answer could not be read"
    text = " ".join(text.split())
    while True:
        stripped = _PREFIX_RE.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    if "Exception - " in text:
        text = text.split("Exception - ", 1)[1]
    return text if len(text) <= 300 else text[:299] + "…"


def _headers(exc: BaseException) -> Mapping[str, Any]:
    for source in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
        getattr(exc, "headers", None),
    ):
        if source is not None and hasattr(source, "get"):
            return source  # type: ignore[no-any-return]
    return {}


def _retry_after(headers: Mapping[str, Any]) -> float | None:
    """Parse ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    try:
        raw_ms = headers.get("retry-after-ms")
        if raw_ms is not None:
            return max(0.0, float(raw_ms) / 1000.0)
        raw = headers.get("retry-after")
        if raw is None:
            return None
        try:
            return max(0.0, float(raw))
        except ValueError:
            when = email.utils.parsedate_to_datetime(str(raw))
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def classify(exc: BaseException, model: str, timeout_s: float) -> Failure:
    """Classify an exception raised by one model call (or by its deadline)."""
    default_provider = model.split("/", 1)[0] if "/" in model else "litellm"
    provider = str(getattr(exc, "llm_provider", None) or default_provider)
    if isinstance(exc, TimeoutError):
        return Failure(provider, None, f"no answer within {timeout_s:g} s", True)
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int) or isinstance(status, bool):
        status = None
    if status is None and "RateLimit" in type(exc).__name__:
        status = 429  # a provider's rate-limit error, as litellm raises it
    message = _clean(getattr(exc, "message", None) or str(exc) or type(exc).__name__)
    name = type(exc).__name__
    if status is None or name in ("Timeout", "APITimeoutError", "APIConnectionError"):
        retryable = True
    else:
        retryable = status in RETRYABLE_STATUSES
    headers = _headers(exc)
    return Failure(provider, status, message, retryable, _retry_after(headers), headers or None)


def backoff_delay(
    attempt: int, base_s: float, max_s: float, retry_after: float | None, rng: random.Random
) -> float:
    """Return the wait before retry number ``attempt`` (1-based).

    Exponential with jitter (``base_s * 2**(attempt-1)``, capped at ``max_s``,
    times a random factor in [0.5, 1]); a ``retry_after`` from the provider is
    a lower bound, itself capped at ``max_s``.
    """
    delay: float = capped_exponential(base_s, max_s, attempt - 1) * rng.uniform(0.5, 1.0)
    if retry_after is not None:
        delay = max(delay, min(max_s, retry_after))
    return delay

"""An OpenAI-compatible stub that rate-limits like a provider: RPM, TPM, concurrent requests.

:class:`RateLimitedStub` is an :class:`~retinue.testing.OpenAIStub` (127.0.0.1
only, scripted answers, per-request handler) with a
:class:`~retinue.testing.quota.ProviderQuota` in front: a request over a limit
is answered ``429`` with a ``Retry-After`` in seconds and OpenAI's error body
(``{"error": {"message": "Rate limit reached on requests per min (RPM): ...",
"type": "requests", "code": "rate_limit_exceeded"}}``), and every answer, 200
or 429, carries OpenAI's ``x-ratelimit-*`` headers for the limits set: the
limit, what remains of it and when it is whole again
(``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
``x-ratelimit-reset-requests``, the same for ``-tokens``; a reset as OpenAI
writes it: ``20ms``, ``1.5s``, ``6m0s``). A 429 of too many requests at once
shows requests and tokens remaining: it was not the rate. A request counts with the tokens it uses:
its prompt and the completion the stub answers (the usage it reports). An
error the handler scripts is sent as it is and not counted. :meth:`report`
says what was admitted per window and at most in any window, and the 429s.

Example::

    with RateLimitedStub(requests_per_minute=60, max_in_flight=4) as stub:
        runner = LiteLLMRunner("openai/x", api_base=stub.url, api_key="x")
        ...
        print(stub.report().rate_limited)
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from retinue.testing.quota import ProviderQuota, QuotaReport, Refusal
from retinue.testing.stub import Handler, OpenAIStub, StubReply, StubRequest, _RequestHandler

__all__ = ["RateLimitedStub"]


class RateLimitedStub(OpenAIStub):
    """A chat-completions server on 127.0.0.1 that answers 429 past its limits.

    Raises:
        InvalidArgument: a limit that is not a positive integer (or None), or
            ``window_s`` not a positive number.
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        max_in_flight: int | None = None,
        window_s: float = 60.0,
    ) -> None:
        """Prepare the server (not started); ``window_s`` is its "minute" (shorter in tests)."""
        super().__init__(handler)
        self.quota = ProviderQuota(
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
            max_in_flight=max_in_flight,
            window_s=window_s,
            start=time.monotonic(),
        )
        self.limited: list[StubRequest] = []
        """The requests answered 429, in order."""

    @property
    def rate_limited(self) -> int:
        """The requests answered 429 so far."""
        with self._lock:
            return self.quota.rate_limited

    def report(self) -> QuotaReport:
        """What the stub admitted (per window, at most in any window) and refused."""
        with self._lock:
            return self.quota.report()

    def _answer(self, http: _RequestHandler, request: StubRequest, body: dict[str, Any]) -> None:
        reply = self._reply(request)
        if reply.status != 200:
            self._send(http, request, body, reply)
            return
        message, usage = self._resolved(request, body, reply)
        with self._lock:
            now = time.monotonic()
            refusal = self.quota.admit(sum(usage), now)
            headers = self._headers(now)
            if refusal is not None:
                self.limited.append(request)
        if refusal is not None:
            self._send(http, request, body, _too_many(refusal, headers))
            return
        try:
            answer = dataclasses.replace(
                reply, message=message, usage=usage, headers={**headers, **reply.headers}
            )
            self._send(http, request, body, answer)
        finally:
            with self._lock:
                self.quota.done()

    def _headers(self, now: float) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers for the limits set (under the lock)."""
        quota = self.quota
        requests, tokens = quota.remaining(now)
        reset = duration(quota.reset_in(now))
        headers: dict[str, str] = {}
        if quota.requests_per_minute is not None:
            headers["x-ratelimit-limit-requests"] = str(quota.requests_per_minute)
            headers["x-ratelimit-remaining-requests"] = str(requests)
            headers["x-ratelimit-reset-requests"] = reset
        if quota.tokens_per_minute is not None:
            headers["x-ratelimit-limit-tokens"] = str(quota.tokens_per_minute)
            headers["x-ratelimit-remaining-tokens"] = str(tokens)
            headers["x-ratelimit-reset-tokens"] = reset
        return headers


def duration(seconds: float) -> str:
    """``seconds`` as OpenAI writes a reset time: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1.0:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(round(seconds, 3), 60.0)
    return f"{int(minutes)}m{rest:g}s" if minutes else f"{rest:g}s"


def _too_many(refusal: Refusal, headers: dict[str, str]) -> StubReply:
    """The 429 a provider sends for ``refusal``: Retry-After and OpenAI's error body."""
    return StubReply(
        status=429,
        error=refusal.message,
        error_type="tokens" if refusal.kind == "tokens" else "requests",
        error_code="rate_limit_exceeded",
        headers={**headers, "Retry-After": str(refusal.retry_after_s)},
    )

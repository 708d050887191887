"""One model call through litellm: its arguments, its deadline, its retries, its cost.

retinue owns the retry and deadline logic (litellm's ``num_retries`` needs a
package it does not declare, and ``timeout=`` is not enforced for custom
providers): :func:`complete` bounds each attempt with a deadline in its task,
retries what :func:`~retinue.llm.model._retry.classify` calls transient with
jittered exponential backoff (``Retry-After`` honoured), and keeps at most
``Limits.max_concurrent_calls`` calls of one model in flight on the loop.
Under provider limits each attempt is first admitted by the runtime's gate
(:mod:`~retinue.llm.model._limits`), and its end reported back to it.
:func:`usage_of` reads the tokens and the cost (litellm's local cost map; a
model it does not price costs 0.0).

A streamed call (``CallSettings.stream``) goes through litellm's streaming
path: each piece of text is reported as it arrives (``ModelCallWatch.delta``),
and the chunks are assembled by litellm's ``stream_chunk_builder`` into the
response a plain call gives (text, tool calls in pieces, parallel ones, and the
usage the provider reports: ``stream_options.include_usage`` is asked for where
the provider takes it). Deadline, retries and the per-model bound hold for the
whole stream as for one plain answer; a retried call streams again. A provider
that cannot stream fails at once with a line saying so.
"""

from __future__ import annotations

import asyncio
import random
import weakref
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from retinue.actors.events import ModelCallWatch
from retinue.errors import ModelCallFailed
from retinue.llm.model._bound import CallBound
from retinue.llm.model._deadline import Deadline
from retinue.llm.model._limits import LimitedCalls
from retinue.llm.model._provider import SCRIPTED_PROVIDER
from retinue.llm.model._retry import backoff_delay, classify
from retinue.llm.model._streaming import stream_kwargs, streamed
from retinue.protocol.messages import Usage

__all__ = ["CallSettings", "complete", "usage_of"]

_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, CallBound]]
_semaphores = weakref.WeakKeyDictionary()


_last: tuple[weakref.ref[asyncio.AbstractEventLoop], dict[str, CallBound]] | None = None
"""The last loop asked about and its bounds (every turn runs on the runtime's one loop:
its bounds are found without a weak key built per call)."""


def _semaphore(model: str, size: int) -> CallBound:
    """Return the per-model call bound of the running event loop."""
    global _last
    loop = asyncio.get_running_loop()
    last = _last
    if last is not None and last[0]() is loop:
        per_loop = last[1]
    else:
        per_loop = _semaphores.setdefault(loop, {})
        _last = (weakref.ref(loop), per_loop)
    semaphore = per_loop.get(model)
    if semaphore is None:
        semaphore = per_loop[model] = CallBound(size)
    return semaphore


@dataclass
class CallSettings:
    """How one runner calls its model: what litellm gets, the deadline, the retries."""

    model: str
    kwargs: dict[str, Any]
    request_timeout_s: float
    retries: int
    retry_base_s: float
    retry_max_s: float
    rng: random.Random = field(default_factory=random.Random)
    stream: bool = False

    @property
    def priced(self) -> bool:
        """Whether litellm's cost map may price the model (the offline model costs nothing)."""
        return not self.model.startswith(SCRIPTED_PROVIDER + "/")


async def complete(
    litellm: ModuleType,
    settings: CallSettings,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    max_in_flight: int,
    watch: ModelCallWatch | None = None,
    limited: LimitedCalls | None = None,
) -> Any:
    """Call the model with ``messages`` (and ``tools``); return litellm's response.

    ``watch`` is told of each retry and, for a streamed call, of each piece of
    text as it arrives; ``limited`` admits each attempt under the provider
    limits (None: none covers the model).

    Raises:
        ModelCallFailed: a call failed for good (one line: provider, status,
            message, attempts), or the provider cannot stream; an interrupt
            cancels the call instead (also while it waits for admission).
        ProviderLimitExceeded: its token estimate can never fit a provider limit.
    """
    kwargs = dict(settings.kwargs, messages=messages)
    if tools:
        kwargs["tools"] = tools
    if settings.stream:
        kwargs.update(stream_kwargs(litellm, settings.model, kwargs))
    semaphore = _semaphore(settings.model, max_in_flight)
    attempt = 0
    while True:
        attempt += 1
        call_id = None if limited is None else await limited.admit(messages, tools)
        try:
            # a place taken at once when one is free (no coroutine: CallBound), waited for
            # otherwise; a deadline in this task, not wait_for (which wraps the attempt in a
            # task of its own, two more turns of the loop per call), nor asyncio.timeout (two
            # coroutines to enter and leave): the same rule (retinue.llm.model._deadline)
            waiter = semaphore.take()
            if waiter is not None:
                await semaphore.wait(waiter)
            try:
                with Deadline(settings.request_timeout_s):
                    if settings.stream:  # assembled into the response a plain call gives
                        delta = None if watch is None else watch.delta
                        response = await streamed(litellm, kwargs, delta)
                    else:  # litellm's own coroutine: no frame of ours to make and resume
                        response = await litellm.acompletion(**kwargs)
            finally:
                semaphore.give()
        except Exception as exc:  # CancelledError (an interrupt) is not an Exception
            failure = classify(exc, settings.model, settings.request_timeout_s)
            if call_id is not None and limited is not None:
                limited.failed(call_id, failure)
        except BaseException:
            if call_id is not None and limited is not None:
                limited.abandoned(call_id)
            raise
        else:
            if call_id is not None and limited is not None:
                limited.answered(call_id, response)
            return response
        if not failure.retryable or attempt > settings.retries:
            raise ModelCallFailed(
                failure.line(attempt), provider=failure.provider, status=failure.status
            )
        delay = backoff_delay(
            attempt, settings.retry_base_s, settings.retry_max_s, failure.retry_after, settings.rng
        )
        if watch is not None:
            watch.retry(attempt, failure.line(attempt), delay)
        await asyncio.sleep(delay)


def usage_of(litellm: ModuleType, settings: CallSettings, response: Any) -> Usage:
    """Return the tokens and cost of one response (0.0 for a model litellm does not price).

    The cost is the one litellm computed as it answered (``response_cost`` in the
    response's hidden parameters); only a response without that entry is priced
    again through ``litellm.completion_cost``.
    """
    usage = getattr(response, "usage", None)
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion = int(getattr(usage, "completion_tokens", 0) or 0)
    cost = 0.0
    if settings.priced:
        hidden = getattr(response, "_hidden_params", None) or {}
        if "response_cost" in hidden:
            # litellm priced the call as it answered (None: it has no price for
            # the model); asking again would repeat its failed map lookups
            value = hidden["response_cost"]
        else:
            try:
                value = litellm.completion_cost(completion_response=response)
            except Exception:  # a model litellm does not price costs 0.0
                value = 0.0
        try:
            cost = max(0.0, float(value or 0.0))
        except (TypeError, ValueError):
            cost = 0.0
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost)

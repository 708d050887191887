"""The litellm side of the chaos model: an :class:`~retinue.testing.chaos_answers.Answer`
delivered the way a provider would deliver it.

A message or raw choices go through litellm's own conversion of a provider's
JSON (``convert_to_model_response_object``, what its OpenAI path runs on
every response), so litellm fills in what it fills in for a real provider (an
id for a tool call that has none) and fails on what it fails on (content
parts, null choices). An error is raised as the litellm exception a provider's
status maps to, with its ``Retry-After`` header. This module imports litellm:
only the chaos model's responder imports it, on its first call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import litellm
from litellm import ModelResponse
from litellm.litellm_core_utils.llm_response_utils.convert_dict_to_response import (
    convert_to_model_response_object,
)

from retinue.llm.model import SCRIPTED_PROVIDER, count_tokens
from retinue.testing.chaos_answers import Answer

__all__ = ["deliver"]

_ERRORS: Mapping[int, Any] = {
    400: litellm.BadRequestError,
    429: litellm.RateLimitError,
    500: litellm.InternalServerError,
    503: litellm.ServiceUnavailableError,
}


def _error(answer: Answer, model: str) -> Exception:
    """The litellm exception a provider's ``answer.status`` becomes."""
    error: Exception
    if answer.status == "timeout":
        error = litellm.Timeout(
            f"chaos: no answer in time [{answer.kind}]", model=model, llm_provider=SCRIPTED_PROVIDER
        )
        return error
    status = int(answer.status or 500)
    headers = {} if answer.retry_after is None else {"retry-after": answer.retry_after}
    response = httpx.Response(
        status, headers=headers, request=httpx.Request("POST", "http://127.0.0.1/chaos")
    )
    message = f"chaos: the provider answered {status}"
    kind = _ERRORS.get(status)
    if kind is not None:
        error = kind(message, model=model, llm_provider=SCRIPTED_PROVIDER, response=response)
        return error
    error = litellm.APIError(
        status_code=status,
        message=message,
        llm_provider=SCRIPTED_PROVIDER,
        model=model,
        response=response,
    )
    return error


def _usage(messages: Sequence[Any], answer: Answer) -> dict[str, int]:
    prompt = count_tokens(json.dumps(list(messages), default=str))
    completion = count_tokens(json.dumps(answer.message or {}, default=str))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _response(answer: Answer, model: str, messages: Sequence[Any]) -> Any:
    """The response as litellm makes it from a provider's raw JSON."""
    if answer.message is not None:
        finish = "tool_calls" if answer.message.get("tool_calls") else "stop"
        choices: Any = [{"index": 0, "finish_reason": finish, "message": dict(answer.message)}]
    else:
        choices = answer.choices
    raw = {
        "id": f"chatcmpl-chaos-{answer.kind}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": _usage(messages, answer),
    }
    return convert_to_model_response_object(
        response_object=raw, model_response_object=ModelResponse()
    )


async def deliver(answer: Answer, model: str, messages: Sequence[Any], hang_s: float | None) -> Any:
    """Wait ``answer.delay_s`` (``hang_s`` for a hang), then return or raise the answer;
    with ``hang_s`` None a hang fails at once as a timeout.

    Raises:
        litellm exceptions: the answer is an error (429, 5xx, 400, a timeout),
            or a response litellm cannot use (null choices, content parts).
    """
    delay = answer.delay_s
    if answer.hang:
        if hang_s is None:
            raise _error(dataclasses.replace(answer, status="timeout"), model)
        delay = hang_s
    if delay > 0:
        await asyncio.sleep(delay)
    if answer.status is not None:
        raise _error(answer, model)
    return _response(answer, model, messages)

"""The offline model ``retinue/scripted``, registered with litellm as a custom provider.

It goes through litellm's own call path (``litellm.acompletion`` ->
custom provider -> ``ModelResponse`` with tool calls and usage), needs no key
and no network, and answers deterministically (see :mod:`retinue.llm.script`).
This module imports litellm: only :func:`retinue.llm.provider.load_litellm`
imports it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from litellm import CustomLLM, ModelResponse

from retinue.llm.script import SCRIPTED_MODEL, count_tokens, reply_deltas, script_reply

__all__ = ["ScriptedLLM"]


def _reply(
    messages: Sequence[Mapping[str, Any]], optional_params: Mapping[str, Any]
) -> tuple[dict[str, Any], str, dict[str, int]]:
    """The scripted answer to ``messages``: the message, its finish reason and its usage."""
    tools = optional_params.get("tools") or []
    reply = script_reply(messages, tools)
    prompt = count_tokens(json.dumps(list(messages), default=str))
    completion = count_tokens(json.dumps(reply))
    finish = "tool_calls" if reply.get("tool_calls") else "stop"
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return reply, finish, usage


def _respond(messages: Sequence[Mapping[str, Any]], optional_params: Mapping[str, Any]) -> Any:
    reply, finish, usage = _reply(messages, optional_params)
    return ModelResponse(
        model=SCRIPTED_MODEL,
        choices=[{"index": 0, "finish_reason": finish, "message": reply}],
        usage=usage,
    )


async def _stream(
    messages: Sequence[Mapping[str, Any]], optional_params: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """The scripted answer as litellm's generic streaming chunks: text and tool calls in
    pieces (see :func:`~retinue.llm.script.reply_deltas`), the usage with the last one."""
    reply, finish, usage = _reply(messages, optional_params)
    deltas = reply_deltas(reply)
    for delta in deltas:
        call = (delta.get("tool_calls") or [None])[0]
        yield {
            "text": delta.get("content") or "",
            "tool_use": call,
            "is_finished": False,
            "finish_reason": "",
            "usage": None,
            "index": 0,
        }
    yield {
        "text": "",
        "tool_use": None,
        "is_finished": True,
        "finish_reason": finish,
        "usage": usage,
        "index": 0,
    }


class ScriptedLLM(CustomLLM):  # type: ignore[misc]
    """litellm handler of the ``retinue`` provider: the scripted, offline model."""

    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        """Answer synchronously (litellm's ``completion``)."""
        return _respond(messages, _optional(args, kwargs))

    async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        """Answer asynchronously (litellm's ``acompletion``)."""
        return _respond(messages, _optional(args, kwargs))

    async def astreaming(
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """Stream the answer (litellm's ``acompletion(stream=True)``)."""
        async for chunk in _stream(messages, _optional(args, kwargs)):
            yield chunk


def _optional(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    """Find litellm's ``optional_params`` (the tools live there), positional or keyword."""
    if "optional_params" in kwargs:
        return kwargs["optional_params"] or {}
    # litellm's positional order: api_base, custom_prompt_dict, model_response,
    # print_verbose, encoding, api_key, logging_obj, optional_params, ...
    if len(args) >= 8 and isinstance(args[7], Mapping):
        return args[7]
    return {}

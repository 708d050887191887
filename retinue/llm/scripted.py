"""The offline model ``retinue/scripted``, registered with litellm as a custom provider.

It goes through litellm's own call path (``litellm.acompletion`` ->
custom provider -> ``ModelResponse`` with tool calls and usage), needs no key
and no network, and answers deterministically (see :mod:`retinue.llm.script`).
This module imports litellm: only :func:`retinue.llm.provider.load_litellm`
imports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from litellm import CustomLLM, ModelResponse

from retinue.llm.script import SCRIPTED_MODEL, count_tokens, script_reply

__all__ = ["ScriptedLLM"]


def _respond(messages: Sequence[Mapping[str, Any]], optional_params: Mapping[str, Any]) -> Any:
    tools = optional_params.get("tools") or []
    reply = script_reply(messages, tools)
    prompt = count_tokens(json.dumps(list(messages), default=str))
    completion = count_tokens(json.dumps(reply))
    finish = "tool_calls" if reply.get("tool_calls") else "stop"
    return ModelResponse(
        model=SCRIPTED_MODEL,
        choices=[{"index": 0, "finish_reason": finish, "message": reply}],
        usage={
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    )


class ScriptedLLM(CustomLLM):  # type: ignore[misc]
    """litellm handler of the ``retinue`` provider: the scripted, offline model."""

    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        """Answer synchronously (litellm's ``completion``)."""
        return _respond(messages, _optional(args, kwargs))

    async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        """Answer asynchronously (litellm's ``acompletion``)."""
        return _respond(messages, _optional(args, kwargs))


def _optional(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    """Find litellm's ``optional_params`` (the tools live there), positional or keyword."""
    if "optional_params" in kwargs:
        return kwargs["optional_params"] or {}
    # litellm's positional order: api_base, custom_prompt_dict, model_response,
    # print_verbose, encoding, api_key, logging_obj, optional_params, ...
    if len(args) >= 8 and isinstance(args[7], Mapping):
        return args[7]
    return {}

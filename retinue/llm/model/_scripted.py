"""The litellm handler of the ``retinue/`` provider: the offline models, registered once.

``retinue/scripted`` answers deterministically (see :mod:`retinue.llm.model._script`);
other names go to the responder registered for them
(:mod:`retinue.llm.model._offline`, e.g. ``retinue/chaos`` while a
``retinue.testing.ChaosModel`` is installed). Either way the call goes through
litellm's own call path (``litellm.acompletion`` -> custom provider ->
``ModelResponse`` with tool calls and usage), with no key and no network.
A name nothing serves fails at once with a 400 that says what to do.
This module imports litellm: only :func:`retinue.llm.model._provider.load_litellm`
imports it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any

import litellm
from litellm import CustomLLM, ModelResponse

from retinue.llm.model._offline import offline_responder
from retinue.llm.model._script import (
    SCRIPTED_MODEL,
    SCRIPTED_PROVIDER,
    count_tokens,
    reply_deltas,
    script_reply,
)

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


async def _answer(model: str, messages: list[Any], optional_params: Mapping[str, Any]) -> Any:
    """Answer with the scripted model or the responder registered for ``model``.

    Raises:
        litellm.BadRequestError: no offline model of that name is served.
    """
    name = model.rsplit("/", 1)[-1]
    if name == SCRIPTED_MODEL.rsplit("/", 1)[-1]:
        return _respond(messages, optional_params)
    responder = offline_responder(name)
    if responder is None:
        full = f"{SCRIPTED_PROVIDER}/{name}"
        hint = (
            "install a retinue.testing.ChaosModel first (with ChaosModel(seed=...): ...)"
            if name == "chaos"
            else f"use {SCRIPTED_MODEL}, or register it with retinue.llm.model._offline"
        )
        raise litellm.BadRequestError(
            f"no offline model {full!r} is served in this process; {hint}",
            model=full,
            llm_provider=SCRIPTED_PROVIDER,
        )
    return await responder(f"{SCRIPTED_PROVIDER}/{name}", messages, optional_params)


class _Deferred(Coroutine[Any, Any, Any]):
    """A coroutine made only when it is first run: dropped unrun, it warns nobody.

    litellm's ``acompletion`` calls the provider's ``acompletion`` on an
    executor thread and awaits what it returns; a call cancelled meanwhile (an
    interrupt, a deadline) drops that, and a real coroutine dropped unrun is
    reported on stderr ("coroutine ... was never awaited").
    """

    def __init__(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        self._make: Callable[[], Coroutine[Any, Any, Any]] | None = make
        self._coroutine: Coroutine[Any, Any, Any] | None = None

    def _started(self) -> Coroutine[Any, Any, Any]:
        if self._coroutine is None:
            make, self._make = self._make, None
            assert make is not None
            self._coroutine = make()
        return self._coroutine

    def send(self, value: Any) -> Any:
        """Run the coroutine on (made now if it was not)."""
        return self._started().send(value)

    def throw(self, *args: Any) -> Any:
        """Raise into the coroutine (made now if it was not)."""
        return self._started().throw(*args)

    def close(self) -> None:
        """Close the coroutine if it was made."""
        if self._coroutine is not None:
            self._coroutine.close()
        self._make = None

    def __await__(self) -> Generator[Any, None, Any]:
        """Await the coroutine (made now)."""
        return self._started().__await__()


def _chunks(
    reply: Mapping[str, Any], finish: str, usage: Mapping[str, int] | None
) -> Iterator[dict[str, Any]]:
    """An answer as litellm's generic streaming chunks: text and tool calls in pieces
    (see :func:`~retinue.llm.model._script.reply_deltas`), the usage with the last one."""
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


def _message_of(response: Any) -> tuple[dict[str, Any], str, dict[str, int] | None]:
    """A registered model's response as the message, finish reason and usage to stream."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        return {"role": "assistant", "content": ""}, "stop", None
    message = choices[0].message
    reply: dict[str, Any] = {"role": "assistant", "content": message.content}
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        reply["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in calls
        ]
    usage = getattr(response, "usage", None)
    counts = None
    if usage is not None:
        counts = {
            "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
            "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
            "total_tokens": int(getattr(usage, "total_tokens", 0) or 0),
        }
    return reply, choices[0].finish_reason or "stop", counts


async def _stream(
    model: str, messages: list[Any], optional_params: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """Stream the scripted answer, or a registered model's (its answer, then its pieces).

    Raises:
        litellm exceptions: as :func:`_answer` (before the first chunk).
    """
    if model.rsplit("/", 1)[-1] == SCRIPTED_MODEL.rsplit("/", 1)[-1]:
        reply, finish, usage = _reply(messages, optional_params)
        counts: Mapping[str, int] | None = usage
    else:
        reply, finish, counts = _message_of(await _answer(model, messages, optional_params))
    for chunk in _chunks(reply, finish, counts):
        yield chunk


class ScriptedLLM(CustomLLM):  # type: ignore[misc]
    """litellm handler of the ``retinue`` provider: the offline models."""

    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        """Answer synchronously (litellm's ``completion``); others than scripted on a new loop."""
        if model.rsplit("/", 1)[-1] == SCRIPTED_MODEL.rsplit("/", 1)[-1]:
            return _respond(messages, _optional(args, kwargs))
        return asyncio.run(_answer(model, messages, _optional(args, kwargs)))

    def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        """Answer asynchronously (litellm's ``acompletion``): a coroutine made when awaited."""
        optional = _optional(args, kwargs)
        return _Deferred(lambda: _answer(model, messages, optional))

    async def astreaming(
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """Stream the answer (litellm's ``acompletion(stream=True)``)."""
        async for chunk in _stream(model, messages, _optional(args, kwargs)):
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

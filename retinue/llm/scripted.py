"""The litellm handler of the ``retinue/`` provider: the offline models, registered once.

``retinue/scripted`` answers deterministically (see :mod:`retinue.llm.script`);
other names go to the responder registered for them
(:mod:`retinue.llm.offline`, e.g. ``retinue/chaos`` while a
``retinue.testing.ChaosModel`` is installed). Either way the call goes through
litellm's own call path (``litellm.acompletion`` -> custom provider ->
``ModelResponse`` with tool calls and usage), with no key and no network.
A name nothing serves fails at once with a 400 that says what to do.
This module imports litellm: only :func:`retinue.llm.provider.load_litellm`
imports it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from typing import Any

import litellm
from litellm import CustomLLM, ModelResponse

from retinue.llm.offline import offline_responder
from retinue.llm.script import SCRIPTED_MODEL, SCRIPTED_PROVIDER, count_tokens, script_reply

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
            else f"use {SCRIPTED_MODEL}, or register it with retinue.llm.offline"
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


def _optional(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    """Find litellm's ``optional_params`` (the tools live there), positional or keyword."""
    if "optional_params" in kwargs:
        return kwargs["optional_params"] or {}
    # litellm's positional order: api_base, custom_prompt_dict, model_response,
    # print_verbose, encoding, api_key, logging_obj, optional_params, ...
    if len(args) >= 8 and isinstance(args[7], Mapping):
        return args[7]
    return {}

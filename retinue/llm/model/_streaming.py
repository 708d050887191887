"""A streamed model call: litellm's streaming path, assembled into the answer a plain call gives.

:func:`stream_kwargs` checks that the provider can stream (a litellm custom
provider without ``astreaming`` cannot: it fails at once, in one line, instead
of failing each retry with a misleading 503) and asks for the usage in the
last chunk where the provider takes ``stream_options``. :func:`streamed` makes
one streamed call, hands each piece of text to ``on_text`` as it arrives (made
storable: :func:`~retinue.protocol.arrival.piece`), and
assembles the chunks with litellm's ``stream_chunk_builder``: the text, the
tool calls (parallel ones, and arguments sent in pieces, by their index) and
the usage, in the shape of a plain response. An answer with tool calls and no
text keeps ``content`` None, as a plain answer does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from retinue.errors import ModelCallFailed
from retinue.protocol.arrival import piece

__all__ = ["stream_kwargs", "streamed"]


def _custom_handler(litellm: ModuleType, provider: str) -> Any:
    """The handler of a litellm custom provider named ``provider`` (None: not one)."""
    for entry in getattr(litellm, "custom_provider_map", None) or []:
        if isinstance(entry, Mapping) and entry.get("provider") == provider:
            return entry.get("custom_handler")
    return None


def stream_kwargs(litellm: ModuleType, model: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Return the keywords that make a call of ``model`` streamed.

    Raises:
        ModelCallFailed: the provider cannot stream (a custom provider with no
            ``astreaming``); the line says to use ``stream=False``.
    """
    added: dict[str, Any] = {"stream": True}
    try:
        _, provider, _, _ = litellm.get_llm_provider(
            model=model,
            custom_llm_provider=kwargs.get("custom_llm_provider"),
            api_base=kwargs.get("api_base"),
        )
    except Exception:  # an unknown provider: the call itself says so, in its own line
        return added
    handler = _custom_handler(litellm, provider)
    base = getattr(litellm, "CustomLLM", None)
    inherited = getattr(base, "astreaming", None)
    if handler is not None and getattr(type(handler), "astreaming", None) is inherited:
        raise ModelCallFailed(
            f"{model}: the provider {provider!r} cannot stream (its handler has no "
            "astreaming); give the runner stream=False",
            provider=provider,
        )
    if "stream_options" not in kwargs:
        try:
            supported = litellm.get_supported_openai_params(
                model=model, custom_llm_provider=provider
            )
        except Exception:
            supported = None
        if supported and "stream_options" in supported:
            added["stream_options"] = {"include_usage": True}
    return added


def _text_of(chunk: Any) -> str:
    """The text a stream chunk carries (empty if none)."""
    choices = getattr(chunk, "choices", None) or []
    if not choices:
        return ""
    delta = getattr(choices[0], "delta", None)
    text = getattr(delta, "content", None)
    return text if isinstance(text, str) else ""


async def streamed(
    litellm: ModuleType, kwargs: Mapping[str, Any], on_text: Callable[[str], None] | None
) -> Any:
    """Make one streamed call; return the assembled response (None if nothing came).

    ``on_text(piece)`` gets each piece of text as it arrives, a lone surrogate
    escaped (the assembled answer is cleaned by the caller). A provider that
    answers in one piece although asked to stream gives its answer as it is.

    Raises:
        Exception: whatever the call or the stream raises (classified by the caller).
    """
    response = await litellm.acompletion(**kwargs)
    if not hasattr(response, "__aiter__"):
        return response
    chunks: list[Any] = []
    texted = False
    try:
        async for chunk in response:
            chunks.append(chunk)
            text = _text_of(chunk)
            if text:
                texted = True
                if on_text is not None:
                    on_text(piece(text))  # made storable as it arrives
    finally:
        with contextlib.suppress(Exception):
            await response.aclose()  # an interrupted stream releases its connection
    if not chunks:
        return None
    assembled = litellm.stream_chunk_builder(chunks, messages=list(kwargs.get("messages") or []))
    if not texted:
        for choice in getattr(assembled, "choices", None) or []:
            message = getattr(choice, "message", None)
            if message is not None and getattr(message, "tool_calls", None):
                message.content = None  # as a plain answer with only tool calls has it
    return assembled

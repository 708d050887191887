"""Text from outside a model turn, made storable once, where it arrives.

A model turn takes in text the runtime did not write: the model's answer
(its content, each tool call's id, name and arguments, the pieces of a
streamed answer) and each tool's result (host ``@tool`` functions, built-in
workspace tools, MCP tools, the coordinator tools, a host's own toolbox).
Providers send half an emoji: a lone surrogate, which has no UTF-8 form, so no
store, JSON encoder or HTTP body takes it. Each such text is made storable at
its one point of arrival with :func:`~retinue.protocol.text.storable_text` (a
lone surrogate becomes its escape, the six characters ``\\ud83d``; every other
character is kept):

- the answer, by :func:`assistant_message` (the turn's session, as the model
  call returns), before anything reads it;
- a streamed piece, by :func:`piece` (:mod:`retinue.llm.model._streaming`), before
  it is published as a ``ModelDelta``;
- a tool's result and error, by :func:`tool_outcome`
  (:meth:`ToolBox.run <retinue.llm.tools._toolbox.ToolBox.run>`, and the session for
  a toolbox of the host's own).

Nothing downstream cleans again: approval requests, live events
(``ToolCallStarted``...), the chat sent on the next request and the stored
transcript take these texts as they are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from retinue.protocol.chat import ChatMessage
from retinue.protocol.text import storable_text

__all__ = ["assistant_message", "piece", "tool_outcome"]


def piece(text: str) -> str:
    """Return one streamed piece of an answer's text, made storable."""
    return storable_text(text)


def tool_outcome(result: str, error: str | None) -> tuple[str, str | None]:
    """Return a tool call's ``(result, error)`` made storable (``error`` None: it succeeded)."""
    return storable_text(result), None if error is None else storable_text(error)


def _text(value: object) -> str:
    """A field a provider should send as a string, as storable text (None: empty)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):  # arguments a provider decoded already
        try:
            return storable_text(json.dumps(dict(value), ensure_ascii=False))
        except (TypeError, ValueError):
            pass
    return storable_text(str(value))


def assistant_message(message: Any) -> ChatMessage:
    """Return the chat message of a model's answer (litellm's ``Message``), every text storable.

    ``content`` is the answer's text (None when it has none, or sends no
    string); each tool call is in the OpenAI shape with its id, name and
    arguments as storable strings (arguments a provider sent as an object are
    its JSON; none, ``"{}"``). Each call gets an id of its own, after the
    cleaning (a raw lone surrogate and its escape written out are one text
    then): a provider that sends one id twice in a step would otherwise leave
    two results answering one call, a chat the next request is refused for. A
    repeated id becomes ``<id>_<place>`` (an empty one ``call_<place>``), and the
    model sees that id from then on.
    """
    content = getattr(message, "content", None)
    assistant: ChatMessage = {
        "role": "assistant",
        "content": storable_text(content) if isinstance(content, str) else None,
    }
    calls = list(getattr(message, "tool_calls", None) or [])
    if not calls:
        return assistant
    taken: set[str] = set()
    shaped = []
    for place, call in enumerate(calls):
        call_id = _text(getattr(call, "id", None)) or f"call_{place}"
        while call_id in taken:
            call_id = f"{call_id}_{place}"
        taken.add(call_id)
        function = getattr(call, "function", None)
        shaped.append(
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": _text(getattr(function, "name", None)),
                    "arguments": _text(getattr(function, "arguments", None)) or "{}",
                },
            }
        )
    assistant["tool_calls"] = shaped
    return assistant

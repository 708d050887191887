"""The offline models served under litellm's ``retinue/`` provider, by name.

``retinue/scripted`` is built in (:mod:`retinue.llm.model._script`). Others are
registered at run time with :func:`register_offline_model`, as
``retinue.testing.ChaosModel`` registers ``retinue/chaos`` while it is
installed: one litellm custom provider (registered once, by
:func:`retinue.llm.model._provider.load_litellm`) serves every name, so each model
goes through litellm's own call path with no key and no network.

A responder is ``async responder(model, messages, optional_params)``: ``model``
is the full name (``retinue/chaos``), ``messages`` the OpenAI chat messages,
``optional_params`` litellm's (the offered ``tools`` live there). It returns a
litellm ``ModelResponse`` or raises a litellm exception (a rate limit, a 5xx...),
as a provider would. This module imports nothing of litellm.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

__all__ = ["OfflineResponder", "offline_responder", "register_offline_model"]

OfflineResponder = Callable[[str, list[Any], Mapping[str, Any]], Awaitable[Any]]
"""``await responder(model, messages, optional_params)`` -> a litellm ``ModelResponse``."""

_lock = threading.Lock()
_responders: dict[str, OfflineResponder] = {}


def register_offline_model(
    name: str, responder: OfflineResponder | None
) -> OfflineResponder | None:
    """Serve ``retinue/<name>`` with ``responder`` (None: stop serving it); return the previous.

    The registration is process-wide: every runtime's calls of that model
    reach ``responder``. ``scripted`` is the built-in model and cannot be replaced.

    Raises:
        ValueError: ``name`` is empty, holds a ``/`` or is ``scripted``.
    """
    if not isinstance(name, str) or not name or "/" in name or name == "scripted":
        raise ValueError(f"an offline model name is one word other than 'scripted', not {name!r}")
    with _lock:
        previous = _responders.pop(name, None)
        if responder is not None:
            _responders[name] = responder
    return previous


def offline_responder(name: str) -> OfflineResponder | None:
    """Return the responder serving ``retinue/<name>``, None if nothing serves it."""
    with _lock:
        return _responders.get(name)

"""The tool call running now: a tool reads its :class:`~retinue.protocol.effects.ToolCall` here.

A model turn runs each tool call with its ``ToolCall`` (its stable
idempotency key, its attempt, whether it was found in doubt) set in a
context variable for the call's task: a ``@tool`` function that takes a
``call: retinue.ToolCall`` parameter is handed it, ``bash`` exports the key
as ``RETINUE_IDEMPOTENCY_KEY``, an MCP call sends it in its request's
``_meta`` and the coordinator's spawns and messages carry it. A call made
outside a turn's journal (a test calling ``ToolBox.call`` itself) gets a
fresh key of its own (:func:`call_or_fresh`).
"""

from __future__ import annotations

import contextvars

from retinue.protocol.effects import ToolCall
from retinue.protocol.ids import new_id

__all__ = ["call_or_fresh", "calling", "current_call"]

_CURRENT: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "retinue_tool_call", default=None
)


def current_call() -> ToolCall | None:
    """Return the tool call running in this task (None outside one)."""
    return _CURRENT.get()


def call_or_fresh(tool: str = "") -> ToolCall:
    """Return the tool call running in this task, or a fresh one (a key of its own)."""
    call = _CURRENT.get()
    return call if call is not None else ToolCall(idempotency_key=new_id(), tool=tool)


class calling:  # lower case: used as a function, ``with calling(call):``
    """Run the block as ``call`` (None: leave the current one as it is).

    A class, not a ``contextlib.contextmanager`` generator: a journaled tool
    step enters one per call, and a generator's frame, its wrapper and two
    ``next`` calls cost more than setting and resetting the variable.
    """

    __slots__ = ("_call", "_token")

    def __init__(self, call: ToolCall | None) -> None:
        """Prepare to run a block as ``call``."""
        self._call = call
        self._token: contextvars.Token[ToolCall | None] | None = None

    def __enter__(self) -> None:
        """Set the running call (unless it is None)."""
        if self._call is not None:
            self._token = _CURRENT.set(self._call)

    def __exit__(self, *exc: object) -> None:
        """Put back the call that ran before the block."""
        token = self._token
        if token is not None:
            self._token = None
            _CURRENT.reset(token)

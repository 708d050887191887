"""What every call group of the facade stands on: the runtime's running parts and the ask.

:class:`Calls` declares the fields :meth:`Runtime.open
<retinue.runtime.Runtime.open>` fills (the one ``_system`` a runtime holds,
writer or reader, and what it was opened with) and the two ways a call goes
through the engine: :meth:`Calls._ask` blocks for the answer,
:meth:`Calls._ask_async` awaits it without blocking the event loop. Each call
group (:mod:`~retinue.runtime.lifecycle`, :mod:`~retinue.runtime.waits`, ...)
subclasses it, and :class:`~retinue.runtime.Runtime` mixes the groups in.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from retinue.actors.calls import Engine
from retinue.actors.commands import Command
from retinue.actors.system import ReadOnlySystem, System
from retinue.errors import RuntimeClosed
from retinue.persistence.store import Store
from retinue.protocol.limits import Limits

__all__ = ["Calls"]

R = TypeVar("R")
NOT_OPEN = "the runtime is not open; use Runtime.open(...)"


class Calls:
    """The plumbing the call groups share; :meth:`Runtime.open` fills the fields."""

    path: Path
    limits: Limits
    readonly: bool
    _system: System | ReadOnlySystem | None

    @property
    def _engine(self) -> Engine:
        """The engine every call of this runtime goes through.

        Raises:
            RuntimeClosed: the runtime was never opened.
        """
        if self._system is None:
            raise RuntimeClosed(NOT_OPEN)
        return self._system.engine

    @property
    def _store(self) -> Store:
        """The runtime's store (open until the runtime closes)."""
        if self._system is None:
            raise RuntimeClosed(NOT_OPEN)
        return self._system.store

    def _ask(self, command: Command[R]) -> R:
        """Submit ``command`` and block until it is answered (committed)."""
        return self._engine.ask(command)

    async def _ask_async(self, command: Command[R]) -> R:
        """Submit ``command`` and await its answer without blocking the loop."""
        return await self._engine.ask_async(command)

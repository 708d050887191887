"""Fault injection into a live runtime's supervisor, for tests that prove commands are atomic.

A supervisor command is one transaction (:mod:`retinue.actors.tree._journal`):
:func:`inject_fault` makes the next command of the kinds named raise at its
``at``-th change to the supervisor's memory, which must leave the store and
the memory exactly as they were (the caller gets
:class:`~retinue.errors.InternalError`) and strand no agent.
:func:`faults_seen` reports each fault that fired, with whether the memory
was found exactly as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from retinue.actors import FaultPlan

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = ["disarm", "faults_seen", "inject_fault"]


def _core(runtime: Runtime) -> Any:
    system = runtime._system
    core = getattr(system, "core", None)
    if core is None:
        raise RuntimeError("fault injection needs an open writer runtime")
    return core


def inject_fault(runtime: Runtime, *commands: str, at: int = 1) -> None:
    """Make the next command whose class name is in ``commands`` (any, if none is named)
    raise at its ``at``-th change (1: the first). One shot.

    Raises:
        RuntimeError: ``runtime`` is not an open writer.
    """
    _core(runtime).world.journal.fault = FaultPlan(at, frozenset(commands))


def disarm(runtime: Runtime) -> bool:
    """Forget a fault that has not fired; return whether one was armed."""
    journal = _core(runtime).world.journal
    armed = journal.fault is not None
    journal.fault = None
    return armed


def faults_seen(runtime: Runtime) -> list[tuple[str, bool, tuple[tuple[str, int], ...]]]:
    """Return each injected fault that fired: the command, whether memory was exactly as
    before it, and the turns (agent id, generation) its rescue ended ``failed``."""
    return list(_core(runtime).rescue.faults)

"""The host-facing facade: open a store, spawn agents, wait, message, close.

``Runtime`` is thread-safe and thin: every call builds one typed command
(:mod:`retinue.actors.commands`) and hands it to the supervisor actor, or, on
a read-only runtime, to the store reader; either answers through a future.
Each sync method and its ``*_async`` twin are one line over the same command:
the sync one waits on the future, the async one awaits it without blocking an
event loop. Start-up and tear-down live below, in :mod:`retinue.actors.system`.

The rooms: ``_runtime`` (:class:`Runtime` itself: ``open``, its state,
``shutdown``, the ``with`` block and every call) and ``_opening`` (the steps of
``open``).
"""

from __future__ import annotations

from retinue.runtime._runtime import Runtime

__all__ = ["Runtime"]

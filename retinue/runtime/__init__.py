"""The host-facing facade: open a store, spawn agents, wait, message, close.

``Runtime`` is thread-safe and thin: every call builds one typed command
(:mod:`retinue.actors.commands`) and hands it to the supervisor actor, or, on
a read-only runtime, to a :class:`~retinue.actors.system._reader.StoreReader`; either
answers through a future. Each sync method and its ``*_async`` twin are one
line over the same command: the sync one waits on the future, the async one
awaits it without blocking an event loop. Start-up and tear-down live below,
in :mod:`retinue.actors.system` (and :mod:`retinue.actors.system._boot`).

The rooms:

- :mod:`~retinue.runtime.facade`: :class:`Runtime` itself: ``open``, its
  state, ``shutdown`` and the ``with`` block;
- :mod:`~retinue.runtime.opening`: the steps of ``open``;
- :mod:`~retinue.runtime.calls`: what every call group stands on (the
  running parts, ``_ask`` / ``_ask_async``);
- the call groups, each sync call next to its twin:
  :mod:`~retinue.runtime.lifecycle` (spawn, follow-up, resume, interrupt,
  close), :mod:`~retinue.runtime.waits` (waits, leases, quiescence),
  :mod:`~retinue.runtime.mailbox` (send, the host's inbox),
  :mod:`~retinue.runtime.reads` (get, agents, inspect, backlog),
  :mod:`~retinue.runtime.events` (subscribe), :mod:`~retinue.runtime.upkeep`
  (backup, compact), :mod:`~retinue.runtime.approvals` (approvals, approve,
  deny).
"""

from __future__ import annotations

from retinue.runtime.facade import Runtime

__all__ = ["Runtime"]

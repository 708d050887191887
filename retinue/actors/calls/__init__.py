"""Calls: how a command crosses from a caller's thread to the supervisor and its answer comes back.

One engine for every call, the host's and the turns' (``Engine``: ask, wait,
give up in time, give back what a cancelled await was handed), the channel
that owns the runtime's open/closing/closed state (``Channel``), the one-shot
reply future (``Reply``; ``LoopReply``, an awaited request's, settles its
loop's future itself; ``TOLD``, a told command's, keeps nothing), the ledger
of answers in flight between threads (``Handover``) and the waiting helpers
(timeouts, a loop's batched post, a loop's wake-up from another thread: ``Wakeup``).

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.actors.calls._channel import Channel, RuntimeState, actor_target, refuse_left
from retinue.actors.calls._engine import Engine, HostReceipt, WaitCommand, handed_events
from retinue.actors.calls._handover import Handover
from retinue.actors.calls._reply import TOLD, LoopReply, Reply, Told
from retinue.actors.calls._waiting import (
    register_poster,
    resolve_timeout,
    timed_out,
    unregister_poster,
)
from retinue.actors.calls._wakeup import Wakeup

__all__ = [
    "TOLD",
    "Channel",
    "Engine",
    "Handover",
    "HostReceipt",
    "LoopReply",
    "Reply",
    "RuntimeState",
    "Told",
    "WaitCommand",
    "Wakeup",
    "actor_target",
    "handed_events",
    "refuse_left",
    "register_poster",
    "resolve_timeout",
    "timed_out",
    "unregister_poster",
]

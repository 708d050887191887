"""The race rules' latches: the events that hold runners and host calls where a race needs them.

:class:`Latches` are shared by the runners and the race rules of one
example: the latch a ``latch`` task blocks on, the hand-over's arming and
its parent, the blocker that holds the event loop, the runner that closes
the runtime. :class:`HostCall` runs one blocking host call on a thread of
its own and says when that call waits for its answer (so its wait was
submitted before whatever the rule does next): the call's thread watches
itself (``sys.setprofile``, only until then) for the sync face blocking on
its ``concurrent.futures.Future``; nothing reads another thread's stack.
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Generic, TypeVar

__all__ = ["HostCall", "Latches"]

T = TypeVar("T")


@dataclass
class Latches:
    """The events the race rules arm and the runners obey (see :mod:`~.data`'s race tasks).

    ``latch`` is open (set) unless a rule holds it; ``handover_armed`` makes
    the next latched coordinator turn the hand-over's parent (claimed once,
    by :meth:`claim_handover`), which sets ``handover_waiting`` as it waits;
    ``loop_held`` / ``loop_free`` are the event-loop blocker's (a ``loophold``
    turn blocks the loop once ``hold_armed``, claimed by clearing it, and then
    closes the runtime from the loop if ``close_from_loop``); a ``shutdown``
    runner closes the runtime once ``shutdown_armed`` and sets
    ``closed_by_runner``.
    """

    closed_by_runner: threading.Event = field(default_factory=threading.Event)
    shutdown_armed: threading.Event = field(default_factory=threading.Event)
    handover_armed: threading.Event = field(default_factory=threading.Event)
    latch: threading.Event = field(default_factory=threading.Event)
    handover_waiting: threading.Event = field(default_factory=threading.Event)
    handover_parent: tuple[str, int] | None = None
    loop_held: threading.Event = field(default_factory=threading.Event)
    loop_free: threading.Event = field(default_factory=threading.Event)
    hold_armed: threading.Event = field(default_factory=threading.Event)
    close_from_loop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        """Start with the latch open."""
        self.latch.set()

    def claim_handover(self, turn: tuple[str, int]) -> bool:
        """Make ``turn`` the hand-over's parent if it is armed and unclaimed; True if it is."""
        with self._lock:
            if self.handover_armed.is_set() and self.handover_parent is None:
                self.handover_parent = turn
                return True
            return False


class HostCall(Generic[T]):
    """One host call on a thread of its own; :attr:`waiting` is set once it waits for its answer.

    Also set when the call returns or raises without waiting. :attr:`outcome`
    is what it returned, or the exception it raised.
    """

    def __init__(self, call: Callable[[], T]) -> None:
        """Prepare the call; :meth:`start` runs it."""
        self.waiting = threading.Event()
        self.outcome: T | BaseException | None = None
        self._call = call
        self._thread = threading.Thread(target=self._run)

    def start(self) -> None:
        """Start the call's thread."""
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the call to end."""
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        """True while the call runs."""
        return self._thread.is_alive()

    def _run(self) -> None:
        sys.setprofile(self._watch)
        try:
            self.outcome = self._call()
        except Exception as exc:
            self.outcome = exc
        finally:
            sys.setprofile(None)
            self.waiting.set()

    def _watch(self, frame: FrameType, event: str, arg: Any) -> None:
        """The thread's profiler: the first ``Future.result`` is the call waiting for its answer."""
        if event != "call" or frame.f_code.co_name != "result":
            return
        if isinstance(frame.f_locals.get("self"), concurrent.futures.Future):
            self.waiting.set()
            sys.setprofile(None)

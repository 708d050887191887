"""The live state behind the web view: one poller thread reading fresh snapshots of the store.

A read-only runtime sees its writer's changes only by reading again, and a
read of a large store costs (about 2 s for 100,000 agents here), so
:class:`LiveTree` polls with a bounded, adaptive interval: never sooner than
``min_interval_s`` after the last read, nor sooner than ``cost_factor`` times
what that read cost, and at least every ``max_interval_s``. Between reads it
looks at the store's LMDB meta pages (two small file reads), and before
reading it asks which transaction a read sees now: if none was committed
since the last read, it does not read at all. The two differ for a moment:
LMDB writes a commit's meta page before it lets readers see the commit (a
durable commit flushes that page first), so a marker taken from the file
alone could claim a commit the read then missed, and the view would stay
stale until the next one. Served in-process
(``retinue run --web``), it also subscribes to the runtime's events: a
committed change wakes it at once, and tool and model calls feed
:class:`~retinue.web.activity.Activity`.

A read-only view also watches whether a process still holds the store's
writer lock (:func:`~retinue.web.liveness.writer_status`, looked at with the
meta pages): when none does, the page says the writer stopped, and that its
running agents were running when it stopped.

Each read that changed something gets the next version; the ids that changed
in each of the last ``history`` versions are kept, so a page that reconnects
with the version it has gets only the rows that changed since (or is told to
reload when it is older than that).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from retinue.errors import RetinueError, RuntimeClosed
from retinue.persistence.integrity import store_usage
from retinue.web.activity import Activity
from retinue.web.liveness import WriterStatus, writer_status
from retinue.web.options import WebOptions
from retinue.web.rows import Row, tool_in_progress
from retinue.web.snapshot import Snapshot, build, changes

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = ["Delta", "LiveTree", "next_pause"]


@dataclass(frozen=True)
class Delta:
    """What a page at some version needs: the rows that changed, the ids that went.

    ``reset`` is True when the page's version is too old (or the changes too
    many): it reloads what it shows instead.
    """

    version: int
    rows: list[Row]
    removed: list[str]
    reset: bool = False


def next_pause(read_s: float, options: WebOptions) -> float:
    """Seconds from one read of the store to the next: ``cost_factor`` times what the
    read cost, within ``[min_interval_s, max_interval_s]``."""
    paced = max(options.min_interval_s, read_s * options.cost_factor)
    return min(paced, options.max_interval_s)


WEB_PAGE = 5_000
"""Agents per page the live view reads from a writer."""


class LiveTree:
    """Polls a runtime's agents and keeps the latest :class:`Snapshot`; thread-safe."""

    def __init__(self, rt: Runtime, options: WebOptions | None = None) -> None:
        """Watch ``rt`` (a writer or a read-only runtime); call :meth:`start` to poll."""
        self.rt = rt
        self.options = options or WebOptions()
        self.activity = Activity(self.options.activity_capacity)
        self.polls = 0  # reads of the store
        self.skips = 0  # polls that found no commit since the last read
        self.read_s = 0.0  # what the last read cost, snapshot included
        self.error: str | None = None
        self._snapshot: Snapshot | None = None
        self._history: deque[tuple[int, frozenset[str], frozenset[str]]] = deque(
            maxlen=self.options.history
        )
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._listeners: set[Callable[[], None]] = set()
        self._marker: tuple[int, int] | None = None
        self._probed: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.writer: WriterStatus | None = None  # None: this runtime is the writer
        self.writer_seen_at: float | None = None  # when a live writer was last seen
        if rt.readonly:
            self.check_writer()

    # -- life ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the poller thread (and, on a writer, the event subscription)."""
        if not self.rt.readonly:
            with contextlib.suppress(RuntimeClosed):
                self._unsubscribe = self.rt.subscribe(self.observe)
        self._thread = threading.Thread(target=self._loop, name="retinue-web-poller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling, wake every listener (so open streams end) and join the thread."""
        self._stop.set()
        self._wake.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._notify()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()

    def add_listener(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` (on the poller thread) after each new version; return remove."""
        with self._cond:
            self._listeners.add(callback)

        def remove() -> None:
            with self._cond:
                self._listeners.discard(callback)

        return remove

    def _notify(self) -> None:
        with self._cond:
            listeners = list(self._listeners)
            self._cond.notify_all()
        for callback in listeners:
            with contextlib.suppress(Exception):  # a closed event loop: its stream is gone
                callback()

    def observe(self, event: Any) -> None:
        """Take one runtime event into account (the subscriber :meth:`start` registers)."""
        if self.activity.handle(event):
            self._wake.set()
        else:
            self._notify()  # tool calls show in the tree before the next read

    # -- the writer -----------------------------------------------------------------------

    def check_writer(self) -> bool:
        """Look again whether a process holds a read-only view's store; return True if that
        changed (an in-process writer is always there: False)."""
        if not self.rt.readonly:
            return False
        status = writer_status(self.rt.path)
        if status.alive:
            self.writer_seen_at = time.time()
        changed = status != self.writer
        self.writer = status
        return changed

    def writer_payload(self) -> dict[str, Any]:
        """Return what the page's badge shows of the writer.

        ``writer`` is ``"in-process"`` (the view runs in the writer),
        ``"live"`` or ``"stopped"``; ``stopped_at`` is when a live writer was
        last seen (None: not since the view started; the page then takes the
        store's last change).
        """
        status = self.writer
        if status is None:
            return {"writer": "in-process", "writer_pid": None, "writer_text": None}
        return {
            "writer": "live" if status.alive else "stopped",
            "writer_pid": status.pid,
            "writer_text": status.describe(),
            "stopped_at": None if status.alive else self.writer_seen_at,
        }

    # -- reading --------------------------------------------------------------------------

    def snapshot(self, timeout: float | None = None) -> Snapshot | None:
        """Return the latest snapshot, waiting up to ``timeout`` for the first one."""
        with self._cond:
            self._cond.wait_for(lambda: self._snapshot is not None or self._stop.is_set(), timeout)
            return self._snapshot

    def _store_marker(self) -> tuple[int, int] | None:
        """The newest meta page's transaction id and the data file's size (None: unknown).

        Cheap (two small file reads) and never behind what a read sees, but ahead of
        it while a commit's meta page is being written: a change here means "look".
        """
        usage = store_usage(self.rt.path)
        return None if usage is None else (usage.txnid, usage.file_bytes)

    def _read_marker(self) -> tuple[int, int] | None:
        """The transaction a read of the store sees now, and the data file's size.

        Taken before a read, it is never ahead of what that read sees (None: unknown).

        Raises:
            StoreCorrupted, StoreError: the store could not be measured.
        """
        space = self.rt.diagnostics.store
        return None if space is None else (space.txnid, space.file_bytes)

    def poll(self, *, force: bool = False) -> bool:
        """Read the store now unless no commit happened since the last read; return True
        if a new version came of it.

        Raises:
            RuntimeClosed: the runtime was closed.
        """
        if self.rt.closed:
            raise RuntimeClosed("the runtime is closed")
        marker = self._read_marker()
        if not force and marker is not None and marker == self._marker and self._snapshot:
            self.skips += 1
            return False
        began = time.perf_counter()
        # A writer's tree is read a page at a time (its supervisor is never held for the
        # whole tree); a reader restores the agents database once per call: one call.
        agents = (
            self.rt.agents(include_closed=True)
            if self.rt.readonly
            else list(self.rt.iter_agents(include_closed=True, page_size=WEB_PAGE))
        )
        tools = self._tools([a.id for a in agents if a.state == "running"], began)
        previous = self._snapshot
        version = (previous.version if previous else 0) + 1
        snap = build(agents, version, time.time(), tools, previous)
        delta = changes(previous, snap)
        self.read_s = time.perf_counter() - began
        self.polls += 1
        self._marker = marker
        if previous is not None and not delta.changed and not delta.removed:
            return False
        with self._cond:
            self._snapshot = snap
            self._history.append((version, frozenset(delta.changed), frozenset(delta.removed)))
        self._notify()
        return True

    def _tools(self, running: list[str], began: float) -> dict[str, str]:
        """Tool calls in progress: from events, else read from running agents' transcripts.

        Transcript reads stop once ``probe_budget_s`` is spent (each read of a
        read-only store costs a snapshot, so a large store gets none).
        """
        tools = self.activity.tools()
        if self.activity.seen_tool_events:
            return tools
        keep = {a: self._probed[a] for a in running if a in self._probed}
        budget = self.options.probe_budget_s
        spent = time.perf_counter() - began
        estimate = spent  # a read-only inspect costs about what agents() did
        for agent in running:
            if spent + estimate > budget:
                break
            t0 = time.perf_counter()
            try:
                detail = self.rt.inspect(agent, transcript_tail=4)
            except RuntimeClosed:
                raise
            except RetinueError:
                continue
            found = tool_in_progress(detail.transcript)
            if found:
                keep[agent] = found
            else:
                keep.pop(agent, None)
            estimate = time.perf_counter() - t0
            spent += estimate
        self._probed = keep
        return {**keep, **tools}

    def delta(self, version: int) -> Delta | None:
        """Return what changed since ``version`` (None: nothing yet or nothing new)."""
        with self._cond:
            snap = self._snapshot
            if snap is None or version >= snap.version:
                return None
            kept = [entry for entry in self._history if entry[0] > version]
            if not kept or kept[0][0] != version + 1:
                return Delta(snap.version, [], [], reset=True)
            changed: set[str] = set()
            removed: set[str] = set()
            for _, ids, gone in kept:
                changed |= ids
                removed |= gone
        changed -= removed
        if len(changed) + len(removed) > self.options.max_changes:
            return Delta(snap.version, [], [], reset=True)
        rows = [snap.rows[i] for i in changed if i in snap.rows]
        return Delta(snap.version, rows, sorted(removed - set(snap.rows)))

    def _loop(self) -> None:
        opts = self.options
        last = 0.0
        while not self._stop.is_set():
            try:
                self.poll()
                self.error = None
            except RuntimeClosed:
                self.error = "the runtime is closed"
                self._stop.set()  # open streams end; the page says it lost the server
                self._notify()
                return
            except RetinueError as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                self._notify()
            last = time.monotonic()
            pause = opts.max_interval_s if self.error else next_pause(self.read_s, opts)
            # Woken early by a committed event; a read-only runtime looks at the
            # meta pages every min_interval_s (no read if nothing was committed).
            deadline = last + pause
            while not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                woken = self._wake.wait(min(left, opts.min_interval_s))
                self._wake.clear()
                if self.check_writer():
                    self._notify()  # the badge changes with no commit in the store
                if woken or self._marker != self._store_marker():
                    floor = last + next_pause(self.read_s, opts)
                    self._stop.wait(max(0.0, floor - time.monotonic()))
                    break

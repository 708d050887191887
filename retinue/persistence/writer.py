"""The store's one writer thread: group commit, in submission order, in the durability chosen.

The supervisor encodes its transitions and hands them over a group at a time
(:meth:`Writer.submit_group`: the transitions it served while its inbox had
more); other writers use :meth:`Writer.submit`. The writer takes everything
queued while the previous commit was in flight and commits it in one LMDB
write transaction (group commit), then calls each callback in submission
order (when more is queued, just before the next commit, once its writes are
in). A callback therefore runs only once its transition is committed:

- ``full``: every commit is fsynced before callbacks run; survives power loss.
- ``buffered``: every commit is written to the OS before callbacks run, so it
  survives a killed process; it is fsynced at least every second and on
  close, so an OS crash or power loss may lose up to the last second.

A full map is doubled and the transaction retried; the caller never sees it.

Timing: :attr:`Writer.on_commit`, when set (:mod:`retinue.actors.timings`
sets it for a metrics collector), is told how long each group commit took:
from the transaction's start to its commit (fsynced in ``full``), less the
answers of earlier groups that run inside it. Unset, a commit reads no clock.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import lmdb

from retinue.errors import StoreCorrupted, StoreError
from retinue.persistence.damage import Guard

__all__ = [
    "FLUSH_INTERVAL_S",
    "MAX_GROUP",
    "Callback",
    "CommitTimer",
    "Durability",
    "StoreStats",
    "Write",
    "Writer",
]

FLUSH_INTERVAL_S = 1.0
"""How often a ``buffered`` store is fsynced while it has unsynced commits."""
MAX_GROUP = 4096
"""The most transitions committed together."""

Write = tuple[str, bytes, bytes | None]
"""``(database name, key, value)``; a value of None deletes the key."""
Callback = Callable[[BaseException | None], None]
"""Called once a transition is committed (None) or failed (the error)."""
CommitTimer = Callable[[float], None]
"""Told the seconds one group commit took (see :attr:`Writer.on_commit`)."""


class Durability(enum.StrEnum):
    """How far a commit has gone before the caller is answered."""

    FULL = "full"
    BUFFERED = "buffered"


@dataclass
class StoreStats:
    """Counters of the writer thread, for benchmarks and diagnostics."""

    commits: int = 0
    transitions: int = 0
    writes: int = 0
    map_growths: int = 0
    syncs: int = 0


class _Item:
    __slots__ = ("callback", "writes")

    def __init__(self, writes: Sequence[Write], callback: Callback) -> None:
        self.writes = writes
        self.callback = callback


_STOP = object()
_FLUSH = object()
log = logging.getLogger("retinue.store")


class Writer:
    """Commits what is submitted, on its own thread; thread-safe to submit to."""

    def __init__(
        self,
        guard: Guard,
        databases: dict[str, Any],
        *,
        durability: Durability,
        max_group: int,
        stats: StoreStats,
    ) -> None:
        """Write ``databases`` of ``guard``'s environment; start the writer thread."""
        self.guard = guard
        self.env = guard.env
        self.dbs = databases
        self.durability = durability
        self.max_group = max_group
        self.stats = stats
        self.failed: BaseException | None = None
        self.on_commit: CommitTimer | None = None  # told each group commit's seconds, if set
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        # Committed groups whose callbacks wait for the next commit's puts (writer only).
        self._unanswered: list[tuple[list[_Item], BaseException | None]] = []
        self._thread = threading.Thread(
            target=self._run, name=f"retinue-store-writer:{guard.folder.name}", daemon=True
        )
        self._thread.start()

    # -- submitting ------------------------------------------------------------

    def submit(self, writes: Sequence[Write], callback: Callback) -> None:
        """Queue ``writes`` for the next group commit; call ``callback`` once committed."""
        self._queue.put(_Item(writes, callback))

    def submit_group(self, group: Sequence[tuple[Sequence[Write], Callback]]) -> None:
        """Queue the transitions of ``group``, in one hand-off, as :meth:`submit` each."""
        self._queue.put([_Item(writes, callback) for writes, callback in group])

    def write_now(self, writes: Sequence[Write]) -> None:
        """Commit ``writes`` and wait for it.

        Raises:
            StoreError: the commit failed.
        """
        done = threading.Event()
        result: list[BaseException | None] = []

        def callback(error: BaseException | None) -> None:
            result.append(error)
            done.set()

        self.submit(writes, callback)
        done.wait()
        error = result[0]
        if isinstance(error, StoreError):  # already typed, with the path
            raise error
        if error is not None:
            raise StoreError(f"commit failed: {error}", path=str(self.guard.folder)) from error

    def flush(self) -> None:
        """Wait until everything submitted so far is committed and synced to disk."""
        done = threading.Event()
        self._queue.put((_FLUSH, done))
        done.wait()

    def stop(self) -> None:
        """Commit what is queued, sync, and end the thread."""
        self._queue.put(_STOP)
        self._thread.join()

    def refusal(self) -> StoreError | None:
        """The error every new transition gets once a commit failed for good (None: none did)."""
        if self.failed is None:
            return None
        failure = StoreCorrupted if isinstance(self.failed, StoreCorrupted) else StoreError
        folder = self.guard.folder
        return failure(f"store {folder} failed: {self.failed}", path=str(folder))

    # -- the thread ------------------------------------------------------------

    def _run(self) -> None:
        last_sync = time.monotonic()
        dirty = False
        while True:
            timeout = None
            if dirty:
                timeout = max(0.0, FLUSH_INTERVAL_S - (time.monotonic() - last_sync))
            try:
                first = self._queue.get(timeout=timeout)
            except queue.Empty:
                self._sync()
                dirty, last_sync = False, time.monotonic()
                continue
            group, controls = self._take(first)
            if group:
                self._commit_group(group)
                dirty = dirty or self.durability is Durability.BUFFERED
            if controls or self._queue.empty():
                self._answer()
            for control in controls:
                if control is _STOP:
                    self._sync()
                    return
                if isinstance(control, tuple) and control[0] is _FLUSH:
                    self._sync()
                    dirty, last_sync = False, time.monotonic()
                    control[1].set()

    def _take(self, first: object) -> tuple[list[_Item], list[object]]:
        """Take what is queued behind ``first``, up to a group: the items, then a control."""
        group: list[_Item] = []
        controls: list[object] = []
        item: object = first
        while True:
            if isinstance(item, _Item):
                group.append(item)
            elif isinstance(item, list):  # submit_group
                group.extend(item)
            else:
                controls.append(item)
                break
            if len(group) >= self.max_group:
                break
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
        return group, controls

    def _sync(self) -> None:
        with contextlib.suppress(lmdb.Error):
            self.env.sync(True)
            self.stats.syncs += 1

    def _answer(self) -> None:
        """Call the callbacks of the committed, unanswered groups, in order."""
        unanswered, self._unanswered = self._unanswered, []
        for group, error in unanswered:
            for item in group:
                try:
                    item.callback(error)
                except Exception:  # a callback must never kill the writer
                    log.exception("a commit callback failed")

    def _commit_group(self, group: list[_Item]) -> None:
        """Commit ``group``; leave its callbacks to the next :meth:`_answer`.

        The groups committed before and not answered yet (more was queued
        behind them) are answered once this group's writes are in its
        transaction, just before it commits: the threads their answers wake
        then run while this commit syncs, instead of taking the GIL from the
        writer at each of its puts (a put releases the GIL).
        """
        if len(group) == 1:
            writes = list(group[0].writes)
        else:  # a key written by several transitions of the group is written once, as it ends
            last = {(name, key): value for item in group for name, key, value in item.writes}
            writes = [(name, key, value) for (name, key), value in last.items()]
        # Transitions queued behind a failed one were built on its state: refuse them too.
        error: BaseException | None = self.failed
        timer = self.on_commit  # the one check when nobody times commits
        if writes and error is None:
            try:
                if timer is None:
                    self._commit(writes)
                else:
                    began = time.perf_counter()
                    answering = self._commit(writes, timed=True)
                    _report(timer, time.perf_counter() - began - answering)
            except Exception as exc:
                error = exc
                self.failed = exc
        self._answer()
        self.stats.transitions += len(group)
        self._unanswered.append((group, error))

    def _commit(self, writes: list[Write], *, timed: bool = False) -> float:
        """Commit ``writes`` in one write transaction, growing a full map.

        Once every write is in the transaction, before the commit, the
        groups committed earlier are answered (see :meth:`_commit_group`);
        ``timed``: return the seconds those answers took (else 0.0).

        Raises:
            StoreCorrupted: the data file shrank, or LMDB met (or the page
                check then found) damage.
            StoreError: LMDB refused the commit for another reason.
        """
        dbs = self.dbs
        self.guard.check_size("commit")
        answering = 0.0
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    for name, key, value in writes:
                        if value is None:
                            txn.delete(key, db=dbs[name])
                        else:
                            txn.put(key, value, db=dbs[name])
                    if timed:
                        began = time.perf_counter()
                        self._answer()
                        answering += time.perf_counter() - began
                    else:
                        self._answer()
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)
                self.stats.map_growths += 1
                continue
            except lmdb.Error as exc:
                self.guard.raise_for("commit", exc)
            self.stats.commits += 1
            self.stats.writes += len(writes)
            self.guard.check_size("commit")  # the size this commit grew the file to
            return answering


def _report(timer: CommitTimer, seconds: float) -> None:
    """Tell ``timer`` a commit's ``seconds``; a failing timer is logged, never the writer's end."""
    try:
        timer(seconds)
    except Exception:
        log.exception("a commit timer failed")

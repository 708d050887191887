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

Spread writes: a transition may carry, besides its writes, ``spread`` writes
(a compaction's deletes) that the writer commits after them in transactions
of at most ``spread_writes`` writes each, in order, before anything queued
behind; the callback runs once the last is committed. Each LMDB write
transaction copies every page it changes to a page that is free (copy-on-write),
and the pages it frees become reusable only after it commits, so one
transaction that deletes thousands of records spread over the key space needs
as many free pages at once: the file's high-water mark grows by what it
touches. Spread over small transactions, the pages freed by one are reused by
the next but one. Whoever gives spread writes orders them so that a crash
after any prefix of them leaves a consistent store.

Timing: :attr:`Writer.on_commit`, when set (:mod:`retinue.actors.timings`
sets it for a metrics collector), is told how long each group commit took:
from the transaction's start to its commit (fsynced in ``full``), less the
answers of earlier groups that run inside it. Unset, a commit reads no clock.
"""

from __future__ import annotations

import collections
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
    "SPREAD_SHARE",
    "SPREAD_WRITES",
    "Callback",
    "CommitTimer",
    "Durability",
    "StoreStats",
    "Submission",
    "Write",
    "Writer",
]

FLUSH_INTERVAL_S = 1.0
"""How often a ``buffered`` store is fsynced while it has unsynced commits."""
MAX_GROUP = 4096
"""The most transitions committed together."""
SPREAD_WRITES = 16
"""The fewest spread writes (a compaction's deletes) one LMDB transaction takes."""
SPREAD_SHARE = 32
"""A spread transaction takes up to the file's pages over this many writes (at least
:data:`SPREAD_WRITES`)."""

Write = tuple[str, bytes, bytes | None]
"""``(database name, key, value)``; a value of None deletes the key."""
Callback = Callable[[BaseException | None], None]
"""Called once a transition is committed (None) or failed (the error)."""
CommitTimer = Callable[[float], None]
"""Told the seconds one group commit took (see :attr:`Writer.on_commit`)."""
Submission = tuple[Sequence[Write], Callback] | tuple[Sequence[Write], Callback, Sequence[Write]]
"""One transition handed over: its writes, its callback and (optional) its spread writes."""


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
    __slots__ = ("callback", "spread", "writes")

    def __init__(
        self, writes: Sequence[Write], callback: Callback, spread: Sequence[Write] = ()
    ) -> None:
        self.writes = writes
        self.callback = callback
        self.spread = spread


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
        spread_writes: int = SPREAD_WRITES,
    ) -> None:
        """Write ``databases`` of ``guard``'s environment; start the writer thread.

        ``spread_writes``: the most spread writes committed in one transaction.
        """
        self.guard = guard
        self.env = guard.env
        self.dbs = databases
        self.durability = durability
        self.max_group = max_group
        self.spread_writes = max(1, spread_writes)
        self.stats = stats
        self.failed: BaseException | None = None
        self.on_commit: CommitTimer | None = None  # told each group commit's seconds, if set
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._held: collections.deque[object] = collections.deque()  # taken, not yet served
        # Committed groups whose callbacks wait for the next commit's puts (writer only).
        self._unanswered: list[tuple[list[_Item], BaseException | None]] = []
        self._thread = threading.Thread(
            target=self._run, name=f"retinue-store-writer:{guard.folder.name}", daemon=True
        )
        self._thread.start()

    # -- submitting ------------------------------------------------------------

    def submit(
        self, writes: Sequence[Write], callback: Callback, spread: Sequence[Write] = ()
    ) -> None:
        """Queue ``writes`` for the next group commit; call ``callback`` once committed.

        ``spread`` writes follow them in transactions of their own (see the module).
        """
        self._queue.put(_Item(writes, callback, spread))

    def submit_group(self, group: Sequence[Submission]) -> None:
        """Queue the transitions of ``group``, in one hand-off, as :meth:`submit` each."""
        self._queue.put([_Item(*entry) for entry in group])

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
                first = self._next(timeout)
            except queue.Empty:
                self._sync()
                dirty, last_sync = False, time.monotonic()
                continue
            group, controls = self._take(first)
            if group:
                self._commit_group(group)
                dirty = dirty or self.durability is Durability.BUFFERED
            if controls or (not self._held and self._queue.empty()):
                self._answer()
            for control in controls:
                if control is _STOP:
                    self._sync()
                    return
                if isinstance(control, tuple) and control[0] is _FLUSH:
                    self._sync()
                    dirty, last_sync = False, time.monotonic()
                    control[1].set()

    def _next(self, timeout: float | None, *, block: bool = True) -> object:
        """Return the next item or control: the held ones first, then the queue's.

        Raises:
            queue.Empty: nothing came (in ``timeout``, or at once if not ``block``).
        """
        while not self._held:
            item = self._queue.get(timeout=timeout) if block else self._queue.get_nowait()
            if not isinstance(item, list):
                return item
            self._held.extend(item)  # submit_group: its transitions, in order
        return self._held.popleft()

    def _take(self, first: object) -> tuple[list[_Item], list[object]]:
        """Take what is queued behind ``first``, up to a group: the items, then a control.

        A transition with spread writes ends its group: what is queued behind it
        waits until they are committed.
        """
        group: list[_Item] = []
        controls: list[object] = []
        item: object = first
        while True:
            if not isinstance(item, _Item):
                controls.append(item)
                break
            group.append(item)
            if item.spread or len(group) >= self.max_group:
                break
            try:
                item = self._next(None, block=False)
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

        Its writes go in one transaction; the spread writes of its last
        transition (only the last may have any: see :meth:`_take`) follow, a
        few per transaction (:meth:`_spread_step`). The groups committed
        before and not answered yet (more was queued behind them) are answered
        once this group's writes are in its transaction, just before it
        commits: the threads their answers wake then run while this commit
        syncs, instead of taking the GIL from the writer at each of its puts
        (a put releases the GIL).
        """
        if len(group) == 1:
            writes = list(group[0].writes)
        else:  # a key written by several transitions of the group is written once, as it ends
            last = {(name, key): value for item in group for name, key, value in item.writes}
            writes = [(name, key, value) for (name, key), value in last.items()]
        batches = [writes] if writes else []
        spread = group[-1].spread  # only the last has any
        step = self._spread_step() if spread else 1
        batches += [list(spread[at : at + step]) for at in range(0, len(spread), step)]
        # Transitions queued behind a failed one were built on its state: refuse them too.
        error: BaseException | None = self.failed
        timer = self.on_commit  # the one check when nobody times commits
        for batch in batches:
            if error is not None:
                break
            try:
                if timer is None:
                    self._commit(batch)
                else:
                    began = time.perf_counter()
                    answering = self._commit(batch, timed=True)
                    _report(timer, time.perf_counter() - began - answering)
            except Exception as exc:
                error = exc
                self.failed = exc
        self._answer()
        self.stats.transitions += len(group)
        self._unanswered.append((group, error))

    def _spread_step(self) -> int:
        """How many spread writes go in one transaction: a share of the pages up to the mark.

        A delete changes (copies) about one page, and the free pages must hold
        about two such transactions at once, so the file's free pages stay
        within a few times ``1 / SPREAD_SHARE`` of it, whatever its size.
        """
        try:
            pages = int(self.env.info()["last_pgno"]) + 1
        except lmdb.Error:
            pages = 0
        return max(self.spread_writes, pages // SPREAD_SHARE)

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

"""The store's one writer thread: group commit, in submission order, in the durability chosen.

The supervisor encodes its transitions and hands them over a group at a time
(:meth:`Writer.submit_queued`: the transitions it served while its inbox had
more, each the writer's item as it is); other writers use :meth:`Writer.submit`
(or :meth:`Writer.submit_group`, several with their callbacks at once). The
writer takes everything queued while the previous commit was in flight and
commits it in one LMDB write transaction (group commit), then calls each
callback in submission order (when more is queued, just before the next
commit, once its writes are in). A callback therefore runs only once its
transition is committed:

- ``full``: every commit is fsynced before callbacks run; survives power loss.
- ``buffered``: every commit is written to the OS before callbacks run, so it
  survives a killed process; it is fsynced at least every second and on
  close, so an OS crash or power loss may lose up to the last second.

A full map is doubled and the transaction retried; the caller never sees it.
Spread writes (a compaction's deletes: :mod:`retinue.persistence.commits`)
follow their transition's writes in small transactions of their own, before
anything queued behind. A reclaim runs at a quiet point
(:meth:`Writer.at_quiet_point`): once everything queued before it is
committed and answered; what is queued meanwhile waits, committed after.

Timing: :attr:`Writer.on_commit`, when set (:mod:`retinue.actors.supervisor._timings`
sets it for a metrics collector), is told how long each group commit took:
from the transaction's start to its commit (fsynced in ``full``), less the
answers of earlier groups that run inside it. Unset, a commit reads no clock.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import operator
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import lmdb

from retinue.errors import StoreCorrupted, StoreError
from retinue.persistence.commits import (
    FLUSH_INTERVAL_S,
    SPREAD_SHARE,
    SPREAD_WRITES,
    Callback,
    CommitTimer,
    Durability,
    Queued,
    StoreStats,
    Submission,
    Write,
)
from retinue.persistence.damage import Guard
from retinue.persistence.gate import Gate

__all__ = ["Writer"]


class _Item:
    """A transition submitted as its writes and a callback (:meth:`Writer.submit`)."""

    __slots__ = ("callback", "spread", "writes")

    def __init__(
        self, writes: Sequence[Write], callback: Callback, spread: Sequence[Write] = ()
    ) -> None:
        self.writes = writes
        self.callback = callback
        self.spread = spread

    def committed(self, error: BaseException | None) -> None:
        """Call the callback: the transition is committed (None) or failed (the error)."""
        self.callback(error)


# The controls are tuples (a queued transition never is one), their tag first.
_STOP = object()
_FLUSH = object()
_QUIET = object()
_T = TypeVar("_T")
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
        gate: Gate | None = None,
        spread_writes: int = SPREAD_WRITES,
    ) -> None:
        """Write ``databases`` of ``guard``'s environment; start the writer thread.

        ``gate``: held exclusive to grow the map (the store's reads hold it
        shared). ``spread_writes``: the fewest spread writes in one transaction.
        """
        self.guard = guard
        self.gate = gate if gate is not None else Gate()
        self.env = guard.env
        self.dbs = databases
        self.durability = durability
        self.max_group = max_group
        self.spread_writes = max(1, spread_writes)
        self.stats = stats
        self.failed: BaseException | None = None
        self.on_commit: CommitTimer | None = None  # told each group commit's seconds, if set
        self.on_grow: Callable[[], None] | None = None  # called once a commit grew the file
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._held: collections.deque[Queued] = collections.deque()  # taken, not yet served
        # Committed groups whose callbacks wait for the next commit's puts (writer only).
        self._unanswered: list[tuple[list[Queued], BaseException | None]] = []
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

    def submit_queued(self, group: list[Queued]) -> None:
        """Queue the transitions of ``group`` as they are, in one hand-off (the list is the
        writer's from now on): each one's ``committed`` is called once it is committed."""
        self._queue.put(group)

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

    def at_quiet_point(self, work: Callable[[], _T]) -> _T:
        """Run ``work`` on the writer thread once all submitted before is committed and answered.

        Nothing is in flight while it runs; what is submitted meanwhile waits
        and is committed after it. Returns what ``work`` returns.

        Raises:
            StoreError: called on the writer thread itself (it would wait for itself).
            Exception: what ``work`` raised.
        """
        if threading.current_thread() is self._thread:
            raise StoreError("a commit callback cannot wait for the store's writer")
        done = threading.Event()
        outcome: list[Any] = []
        self._queue.put((_QUIET, work, outcome, done))
        done.wait()
        result, error = outcome[0]
        if error is not None:
            raise error
        return result  # type: ignore[no-any-return]

    def rebind(self, guard: Guard) -> None:
        """Commit to ``guard``'s environment from now on (a reclaim reopened it; writer thread)."""
        self.guard, self.env = guard, guard.env

    def stop(self) -> None:
        """Commit what is queued, sync, and end the thread."""
        self._queue.put((_STOP,))
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
        buffered = self.durability is Durability.BUFFERED
        get, empty, held = self._queue.get, self._queue.empty, self._held
        first: Any = None
        while True:
            # What the last round handled is let go before the wait for the next: kept in a
            # local meanwhile, a committed group (its transitions, replies and closures) stayed
            # alive while the writer idled, and the collector promoted and scanned it.
            first = None
            # (One line, not two: durability full never waits with a timeout.)
            timeout = max(0.0, FLUSH_INTERVAL_S - (time.monotonic() - last_sync)) if dirty else None
            try:  # as _next, inline: a Python call fewer per commit
                first = held.popleft() if held else get(True, timeout)
            except queue.Empty:
                self._sync()
                dirty, last_sync = False, time.monotonic()
                continue
            if type(first) is list:  # submit_queued or submit_group: its transitions, in order
                if len(first) == 1 and empty() and self._alone(first[0]):
                    # One transition handed over alone, nothing behind it or before it
                    # unanswered (nearly every commit at low load): committed and answered
                    # by _alone, with no group, batch or answer list built around it.
                    dirty = dirty or buffered
                    continue
                if not first:  # (looked at after the one above: nearly no list is empty)
                    continue
                if len(first) <= self.max_group and empty() and not any(map(_SPREAD, first)):
                    # A group handed over alone, nothing behind it (nearly every commit at
                    # low load): committed as it is, with no _take to gather it again.
                    self._commit_group(first)
                    dirty = dirty or buffered
                    if empty():
                        self._answer()
                    continue
                held.extend(first)
                first = held.popleft()
            group, controls = self._take(first)
            if group:
                self._commit_group(group)
                dirty = dirty or self.durability is Durability.BUFFERED
            del group
            if controls or (not self._held and self._queue.empty()):
                self._answer()
            for control in controls:
                tag = control[0]
                if tag is _STOP:
                    self._sync()
                    return
                if tag is _FLUSH:
                    self._sync()
                    dirty, last_sync = False, time.monotonic()
                    control[1].set()
                elif tag is _QUIET:
                    self._sync()
                    dirty, last_sync = False, time.monotonic()
                    _run_quiet(*control[1:])

    def _next(self, timeout: float | None, *, block: bool = True) -> object:
        """Return the next item or control: the held ones first, then the queue's.

        Raises:
            queue.Empty: nothing came (in ``timeout``, or at once if not ``block``).
        """
        while not self._held:
            item = self._queue.get(timeout=timeout) if block else self._queue.get_nowait()
            if not isinstance(item, list):
                return item
            self._held.extend(item)  # submit_queued or submit_group: its transitions, in order
        return self._held.popleft()

    def _take(self, first: Any) -> tuple[list[Queued], list[tuple[Any, ...]]]:
        """Take what is queued behind ``first``, up to a group: the items, then a control.

        A transition with spread writes ends its group: what is queued behind it
        waits until they are committed.
        """
        group: list[Queued] = []
        controls: list[tuple[Any, ...]] = []
        held = self._held
        item: Any = first
        while True:
            if type(item) is tuple:  # a control
                controls.append(item)
                break
            group.append(item)
            if item.spread or len(group) >= self.max_group:
                break
            if held:  # the rest of a submitted group: taken at once when it all joins this one
                if len(group) + len(held) < self.max_group and not any(map(_SPREAD, held)):
                    group += held  # no Python loop per transition (nearly always)
                    held.clear()
                else:  # one by one: a spread write or the group's bound ends it in there
                    item = held.popleft()
                    continue
            if self._queue.empty():  # nothing behind it (no get_nowait to raise Empty)
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
                    item.committed(error)
                except Exception:  # a callback must never kill the writer
                    log.exception("a commit callback failed")

    def _alone(self, item: Queued) -> bool:
        """Commit ``item``, a transition queued alone, and answer it; False (nothing done)
        if it needs :meth:`_commit_group`'s way instead.

        That way is needed for spread writes, a timed commit, a writer that failed
        (it refuses the transition), or earlier groups left unanswered (answered first).
        Otherwise this is :meth:`_commit_group` and :meth:`_answer` for a group of one,
        with no copy of its writes and no batch or answer list built around them. If more
        was queued meanwhile, its answer waits for the next commit (see :meth:`_commit_group`).
        """
        if item.spread or self._unanswered or self.failed is not None or self.on_commit is not None:
            return False
        writes = item.writes
        error: BaseException | None = None
        if writes:  # a transition with no writes commits nothing (as in _commit_group)
            try:
                self._commit(writes)
            except Exception as exc:  # refused from now on (see _commit_group)
                error = self.failed = exc
        self.stats.transitions += 1
        if not self._queue.empty():  # answered just before the next commit (_commit_group)
            self._unanswered.append(([item], error))
            return True
        try:
            item.committed(error)
        except Exception:  # a callback must never kill the writer
            log.exception("a commit callback failed")
        return True

    def _commit_group(self, group: list[Queued]) -> None:
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
        # A key written by several transitions of the group is written once, as it ends.
        writes = list(group[0].writes) if len(group) == 1 else _last_writes(group)
        batches = [writes] if writes else []
        spread = group[-1].spread  # only the last has any
        if spread:
            step = self._spread_step()
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
        if self._unanswered:  # a failed or empty commit answered nothing yet
            self._answer()
        self.stats.transitions += len(group)
        self._unanswered.append((group, error))

    def _spread_step(self) -> int:
        """How many spread writes go in one transaction: a share of the pages up to the mark.

        A delete changes (copies) about one page, and the free pages hold about
        two such transactions at once: a few times ``1 / SPREAD_SHARE`` of the file.
        """
        try:
            pages = int(self.env.info()["last_pgno"]) + 1
        except lmdb.Error:
            pages = 0
        return max(self.spread_writes, pages // SPREAD_SHARE)

    def _commit(self, writes: Sequence[Write], *, timed: bool = False) -> float:
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
        guard = self.guard
        # The guard's size check (Guard.check_size, two Python calls) only if the file's
        # end (one lseek, here) is not where it saw it last: grown, shrunk (refused) or
        # not looked at (its typed error). Nearly every look, before and after a commit,
        # finds it there.
        try:
            size = _lseek(guard.data_fd, 0, _SEEK_END)
        except OSError:
            size = -1
        if size != guard.seen_size:
            size = guard.check_size("commit")
        answering = 0.0
        while True:
            try:
                # Positional arguments (db, parent, write): py-lmdb parses keywords slowly
                # (~400 instructions a call; a lifecycle makes ~25 puts and deletes).
                with self.env.begin(None, None, True) as txn:
                    put, delete = txn.put, txn.delete
                    for name, key, value in writes:
                        if value is None:
                            delete(key, b"", dbs[name])
                        else:
                            put(key, value, True, True, False, dbs[name])
                    if self._unanswered:  # at low load, nearly every commit: none
                        if timed:
                            began = time.perf_counter()
                            self._answer()
                            answering += time.perf_counter() - began
                        else:
                            self._answer()
            except lmdb.MapFullError:
                with self.gate.exclusive():  # LMDB resizes only with no transaction open
                    self.env.set_mapsize(self.env.info()["map_size"] * 2)
                self.stats.map_growths += 1
                continue
            except lmdb.Error as exc:
                self.guard.raise_for("commit", exc)
            self.stats.commits += 1
            self.stats.writes += len(writes)
            try:
                grown = _lseek(guard.data_fd, 0, _SEEK_END)
            except OSError:
                grown = -1
            # The guard saw ``size`` (checked above); nearly every commit leaves the end there.
            if grown != size or grown != guard.seen_size:
                self._moved(size, grown)
            return answering

    def _moved(self, size: int, grown: int) -> None:
        """After a commit: the data file's end was ``size`` before it and is ``grown`` now
        (-1: it could not be read), and one of them is not where the guard saw it last.
        Note a larger end and tell :attr:`on_grow` the file grew; any other end is the
        guard's to check.

        Raises:
            StoreCorrupted: the data file shrank.
            StoreError: its size could not be read.
        """
        guard = self.guard
        seen = guard.seen_size
        if grown > seen:  # this commit grew the file: a larger end needs no second look
            guard.seen_size = grown
        elif grown != seen:  # it shrank (refused), or was not looked at (its typed error)
            grown = guard.check_size("commit")
        if grown > size and self.on_grow is not None:  # told the file grew
            try:
                self.on_grow()
            except Exception:  # a failing watcher is logged, never the writer's end
                log.exception("a store growth watcher failed")


_WRITES = operator.attrgetter("writes")
_SPREAD = operator.attrgetter("spread")
_PLACE = operator.itemgetter(0, 1)  # a write's (database, key)


_lseek = os.lseek  # the data file's end, looked at around each commit (see Writer._commit)
_SEEK_END = os.SEEK_END


def _last_writes(group: list[Queued]) -> list[Write]:
    """The writes of ``group`` in order, each (database, key) once: its last write, in the
    place of its first.

    In C (no Python loop, no tuple built per write but its place): nearly every group
    writes each key once (one agent's records per transition), and a set of the places
    says so; only a group that writes a key twice builds the dict that keeps the last.
    """
    writes: list[Write] = list(itertools.chain.from_iterable(map(_WRITES, group)))
    if len(set(map(_PLACE, writes))) == len(writes):
        return writes
    return list(dict(zip(map(_PLACE, writes), writes, strict=True)).values())


def _run_quiet(work: Callable[[], Any], outcome: list[Any], done: threading.Event) -> None:
    """Run a quiet point's ``work``; hand its result (or error) to the waiting caller."""
    try:
        outcome.append((work(), None))
    except BaseException as exc:  # the caller gets it; the writer goes on
        outcome.append((None, exc))
    finally:
        done.set()


def _report(timer: CommitTimer, seconds: float) -> None:
    """Tell ``timer`` a commit's ``seconds``; a failing timer is logged, never the writer's end."""
    try:
        timer(seconds)
    except Exception:
        log.exception("a commit timer failed")

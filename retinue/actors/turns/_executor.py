"""Shared executors for turns: a bounded pool of worker threads and one event loop.

An agent costs a queue, not a thread. Sync runners run on :class:`WorkerPool`
threads, created lazily by the pool's own spawner thread (so whoever submits a
job, the supervisor above all, never creates a thread or waits for one) and
retired after ``idle_s`` without work. Async runners run as tasks on the one
event loop of :class:`LoopThread`, started on first use. :class:`Executor`
owns both for one runtime and stops both when the runtime closes.

How many sync runners run at once is the supervisor's decision (turn slots
plus the allowance for abandoned runners); the pool only reuses threads.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from retinue.actors.calls import Wakeup, register_poster, unregister_poster
from retinue.actors.turns._loop_close import run_after_tasks, run_closers, runs_closers

__all__ = ["IDLE_S", "Executor", "LoopThread", "WorkerPool", "runner_finished"]

log = logging.getLogger("retinue.executor")

IDLE_S = 10.0
"""Seconds a pool worker waits for a job before it retires."""

Job = Callable[[], None]
_counter = itertools.count(1)


class _Worker(threading.Thread):
    """A pool thread; ``busy`` is true while it runs a job (or has been handed one).

    An idle worker is parked on its own ``wake`` lock (held while it waits): a
    job is handed to it in ``job`` and ``wake`` released, one lock operation
    instead of a shared Condition's wait and notify.
    """

    busy = False

    def __init__(self, target: Callable[[], None], name: str) -> None:
        super().__init__(target=target, name=name, daemon=True)
        self.job: Job | None = None
        self.wake = _thread.allocate_lock()
        self.wake.acquire()


def runner_finished(thread: threading.Thread) -> bool:
    """Return True once ``thread`` has ended or is a pool worker between jobs.

    Tests use it to know that a runner returned and its settle was sent: a
    pooled thread does not end when its runner does.
    """
    return not thread.is_alive() or (isinstance(thread, _Worker) and not thread.busy)


class WorkerPool:
    """Reused worker threads for sync runners; each job runs on one of them.

    A job goes straight to a parked idle worker (the one parked last: its
    thread is warm); with none parked it is queued, and a new worker is
    started by the pool's spawner thread, so ``submit`` never blocks and
    never starts a thread itself (except the spawner, once). Thread-safe.
    """

    def __init__(self, *, name: str = "retinue-runner", idle_s: float = IDLE_S) -> None:
        """Create an empty pool; threads start only when jobs arrive."""
        self._name = name
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._spawn_cond = threading.Condition(self._lock)  # the spawner waits on it for work
        self._jobs: deque[Job] = deque()  # jobs no parked worker took
        self._parked: list[_Worker] = []  # idle workers, each waiting on its wake lock
        self._starting = 0  # workers asked of the spawner, not yet running
        self._workers: set[_Worker] = set()
        self._spawner: threading.Thread | None = None
        self._spawn_wanted = 0
        self._closed = False
        self.peak_threads = 0

    @property
    def threads(self) -> int:
        """Worker threads alive now."""
        with self._lock:
            return len(self._workers)

    @property
    def busy(self) -> int:
        """Worker threads running a job now."""
        with self._lock:
            return sum(1 for w in self._workers if w.busy)

    def start(self) -> None:
        """Start the spawner thread now (otherwise the first job that needs a worker does)."""
        with self._lock:
            if self._spawner is None and not self._closed:
                self._start_spawner()

    def _start_spawner(self) -> None:
        """Start the spawner thread (the pool's lock is held)."""
        self._spawner = threading.Thread(
            target=self._spawn_loop, name=f"{self._name}-spawner", daemon=True
        )
        self._spawner.start()

    def submit(self, job: Job) -> None:
        """Run ``job()`` on a pool thread as soon as one is free (a new one if none is).

        A job submitted after :meth:`shutdown` is dropped.
        """
        with self._lock:
            if self._closed:
                return
            if self._parked:
                worker = self._parked.pop()
                worker.job = job
                worker.busy = True
                worker.wake.release()
                return
            self._jobs.append(job)
            if len(self._jobs) > self._starting:
                self._starting += 1
                self._spawn_wanted += 1
                if self._spawner is None:
                    self._start_spawner()
                else:
                    self._spawn_cond.notify()

    def _spawn_loop(self) -> None:
        while True:
            with self._lock:
                while not self._spawn_wanted and not self._closed:
                    self._spawn_cond.wait()
                if self._closed:
                    return
                self._spawn_wanted -= 1
                if len(self._jobs) <= self._starting - 1:
                    self._starting -= 1  # a worker freed meanwhile takes the job
                    continue
                worker = _Worker(self._work, f"{self._name}-{next(_counter)}")
                self._workers.add(worker)
                self.peak_threads = max(self.peak_threads, len(self._workers))
            try:
                worker.start()
            except Exception:  # the process is out of threads: a later job retries
                log.exception("cannot start a runner thread")
                with self._lock:
                    self._workers.discard(worker)
                    self._starting -= 1
                time.sleep(0.05)

    def _next_job(self, me: _Worker) -> Job | None:
        """Return this worker's next job: a queued one, or one handed to it while parked.

        None: the pool closed, or the worker stayed idle ``idle_s`` and retires
        (it has left the pool either way).
        """
        with self._lock:
            if self._jobs:
                me.busy = True
                return self._jobs.popleft()
            if self._closed:
                self._workers.discard(me)
                return None
            self._parked.append(me)
        if not me.wake.acquire(timeout=self._idle_s):
            with self._lock:
                if me in self._parked:  # nothing was handed to it: idle too long, retire
                    self._parked.remove(me)
                    self._workers.discard(me)
                    return None
            me.wake.acquire()  # handed a job as it timed out: its wake is released
        job, me.job = me.job, None
        if job is None:  # woken by shutdown
            with self._lock:
                self._workers.discard(me)
        return job

    def _work(self) -> None:
        me = threading.current_thread()
        assert isinstance(me, _Worker)
        with self._lock:
            self._starting -= 1
        while True:
            job = self._next_job(me)
            if job is None:
                return
            try:
                job()
            except BaseException:  # a job must never take its worker down
                log.exception("a pooled job failed")
            finally:
                me.busy = False
                del job  # an idle worker keeps nothing of its last job (its turn) alive

    def shutdown(self, timeout: float) -> None:
        """Drop queued jobs and let idle workers go, waiting up to ``timeout`` for them.

        A worker still running a job (a runner ignoring cancellation, which
        the runtime already gave its grace period) is not waited for: it ends
        as soon as its job returns.
        """
        with self._lock:
            self._closed = True
            self._jobs.clear()
            for worker in self._parked:
                worker.wake.release()  # with no job: it leaves the pool
            self._parked.clear()
            self._spawn_cond.notify_all()
            workers = list(self._workers)
            spawner = self._spawner
        deadline = time.monotonic() + timeout
        me = threading.current_thread()
        if spawner is not None:
            spawner.join(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker is not me and not worker.busy:  # busy: ends when its runner returns
                worker.join(max(0.0, deadline - time.monotonic()))


_LAST_PASSES = 10
"""How many passes a closing loop makes over calls and tasks that keep coming (each pass
runs the calls queued and cancels every task) before it closes regardless."""


class LoopThread:
    """One asyncio event loop on its own thread, started on first use."""

    def __init__(self, *, name: str = "retinue-loop") -> None:
        """Create the holder; no loop or thread exists until :meth:`call_soon`."""
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ident: int | None = None  # the loop thread's, once it runs (a field: no call)
        self._closed = False
        self._calls_lock = threading.Lock()
        self._calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._drain_scheduled = False
        self._stopped = False  # set (under _calls_lock) once nothing can run a call any more
        self._wakeup: Wakeup | None = None  # how another thread wakes the loop (made with it)

    @property
    def thread_id(self) -> int | None:
        """The loop thread's ident, or None before it started."""
        thread = self._thread
        return None if thread is None else thread.ident

    def _ensure(self) -> asyncio.AbstractEventLoop | None:
        loop = self._loop
        if loop is not None:
            return loop
        with self._lock:
            if self._closed:
                return None
            if self._loop is None:
                loop = asyncio.new_event_loop()
                with contextlib.suppress(NotImplementedError, OSError):  # else call_soon_threadsafe
                    self._wakeup = Wakeup(loop, self._woken)  # the loop does not run yet
                register_poster(loop, self.call_soon)
                runs_closers(loop)
                thread = threading.Thread(
                    target=self._run, args=(loop,), name=self._name, daemon=True
                )
                self._loop, self._thread = loop, thread
                thread.start()
            return self._loop

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        self._ident = threading.get_ident()
        asyncio.set_event_loop(loop)
        try:
            while True:
                try:
                    loop.run_forever()
                    break  # stopped by shutdown
                except BaseException:  # the loop outlives any task
                    # asyncio re-raises a task's SystemExit or KeyboardInterrupt out of
                    # run_forever (after storing it in the task, whose awaiters see it):
                    # one task must not stop every async turn of the runtime.
                    log.exception("a task on the runtime's event loop raised; the loop goes on")
        finally:
            run_closers(loop)  # what must not be cut off mid-way (retinue.actors.turns._loop_close)
            with contextlib.suppress(Exception):
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                if tasks:
                    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            run_after_tasks(loop)
            self._last_calls(loop)
            if self._wakeup is not None:  # a wake-up from now on fails: nothing runs them
                self._wakeup.close(loop)
            loop.close()
            unregister_poster(loop)  # its poster holds this LoopThread, which holds the loop

    def _last_calls(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run every call still queued as the loop closes (each was promised to run), then
        refuse any more: from here :meth:`call_soon` returns False. A task started late
        (by such a call, or by one drained while the close awaited the others) is
        cancelled and awaited: a turn's start reports itself unrun, never left pending."""
        for _ in range(_LAST_PASSES):
            with self._calls_lock:
                if not self._calls and not asyncio.all_tasks(loop):
                    self._stopped = True
                    return
            with contextlib.suppress(Exception):
                loop.run_until_complete(self._last_pass())
        with self._calls_lock:
            self._stopped = True
            left, self._calls = self._calls, []
        log.warning(
            "the runtime's event loop closed with %d calls and %d tasks still coming after "
            "%d passes",
            len(left),
            len(asyncio.all_tasks(loop)),
            _LAST_PASSES,
        )

    async def _last_pass(self) -> None:
        self._drain_calls()
        me = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not me]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def start(self) -> None:
        """Start the loop's thread now (otherwise the first callback does)."""
        self._ensure()

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> bool:
        """Run ``callback(*args)`` on the loop thread soon; False once the loop is stopped.

        Calls from any thread run in the order they were made. They are
        batched: one wake-up of the loop (a write to its self-pipe) runs every
        call queued until the loop gets to them, so a commit that starts or
        answers many async turns wakes the loop once. A call made on the loop's
        own thread needs no wake-up: the drain is queued as the loop's next
        callback, with no self-pipe write. A call queued before the loop closes
        runs as it closes (:meth:`_last_calls`); after that every call is refused.
        """
        loop = self._loop  # started already, nearly always: no call to _ensure
        if loop is None:
            loop = self._ensure()
            if loop is None:
                return False
        # acquire/release, not ``with``: a with statement binds __enter__ and __exit__ (two
        # bound methods) per call, and every answer to an async turn comes through here.
        lock = self._calls_lock
        lock.acquire()
        try:
            if self._stopped:  # closed: nothing would run it
                return False
            self._calls.append((callback, args))
            if self._drain_scheduled:
                return True
            self._drain_scheduled = True
        finally:
            lock.release()
        try:
            if self._ident == threading.get_ident():
                loop.call_soon(self._drain_calls)  # on the loop: it is running, awake
            elif self._wakeup is not None:  # a byte on the socket it watches (a C call)
                self._wakeup.wake()
            else:
                loop.call_soon_threadsafe(self._drain_calls)
        except BlockingIOError:  # a full socket: a wake-up is pending already
            pass
        except (RuntimeError, OSError):  # closed meanwhile: take the call back
            lock.acquire()
            try:
                with contextlib.suppress(ValueError):  # (run by a last drain meanwhile)
                    self._calls.remove((callback, args))
                self._drain_scheduled = False
            finally:
                lock.release()
            return False
        return True

    def _woken(self) -> None:
        """The loop's reader of its :class:`Wakeup`: take the wake-up, then drain."""
        try:  # noqa: SIM105  # not contextlib.suppress: three Python calls per wake-up
            self._wakeup.clear()  # type: ignore[union-attr]  # set with this reader
        except OSError:  # none pending (an earlier read took it)
            pass
        self._drain_calls()

    def _drain_calls(self) -> None:
        lock = self._calls_lock  # acquire/release, not ``with``: see call_soon
        lock.acquire()
        try:
            calls, self._calls = self._calls, []
            self._drain_scheduled = False
        finally:
            lock.release()
        for callback, args in calls:
            try:
                callback(*args)
            except Exception:  # one broken callback must not starve the others
                log.exception("a callback on the runtime's event loop failed")

    def call_later(self, delay: float, callback: Callable[[], Any]) -> bool:
        """Run ``callback()`` on the loop thread after ``delay`` seconds; False once stopped."""
        return self.call_soon(self._schedule_later, delay, callback)

    def _schedule_later(self, delay: float, callback: Callable[[], Any]) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_later(delay, callback)

    def shutdown(self, timeout: float) -> None:
        """Stop the loop, then (on its thread) await its closers and cancel every task left.

        Waits up to ``timeout`` for the loop's thread.
        """
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join(timeout)


class Executor:
    """The executors of one runtime: sync runners' pool and async runners' loop."""

    def __init__(self, *, idle_s: float = IDLE_S) -> None:
        """Create both; neither starts a thread before its first job (or :meth:`start`)."""
        self.pool = WorkerPool(idle_s=idle_s)
        self.loop = LoopThread()

    def start(self) -> None:
        """Start the event loop's thread and the pool's spawner now, on the caller's thread.

        The runtime calls this as it opens, so neither the supervisor nor the
        store's writer (which runs the commit effects that start turns) ever
        starts a thread.
        """
        self.loop.start()
        self.pool.start()

    def shutdown(self, timeout: float) -> None:
        """Stop the loop (cancelling its tasks) and the pool, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        self.loop.shutdown(timeout)
        self.pool.shutdown(max(0.0, deadline - time.monotonic()))

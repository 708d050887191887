"""A loop's wake-up from other threads through a socket it watches (``Wakeup``).

A host's poster made on its loop's thread, and a runtime's loop thread, wake
their loop with a byte on a socket the loop watches instead of
``call_soon_threadsafe``. What that must keep: one wake-up per batch, every
call run once and in order, a closed loop refusing, a loop that cannot watch
a socket still served, and no socket left open once the loop is gone.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
from typing import Any

import pytest
from support import CountingLoop

from retinue.actors.calls import Wakeup
from retinue.actors.calls._waiting import _Batched, poster
from retinue.actors.turns._executor import LoopThread

WATCHDOG_S = 30.0


class NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop that cannot watch a file descriptor (as asyncio's proactor loop)."""

    def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:  # type: ignore[override]
        raise NotImplementedError


def _pending(post: _Batched) -> bytes:
    """The wake-up bytes the loop has not taken yet (read without taking them)."""
    wakeup = post._wakeup
    assert wakeup is not None
    try:
        return wakeup._rsock.recv(4096, socket.MSG_PEEK)
    except BlockingIOError:
        return b""


def _run_loop(loop: asyncio.AbstractEventLoop) -> threading.Thread:
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return thread


def _made_on(loop: asyncio.AbstractEventLoop) -> Any:
    """The poster of ``loop`` (running on another thread), made on the loop's thread."""
    made: list[Any] = []
    done = threading.Event()

    def make() -> None:
        made.append(poster(loop))
        done.set()

    loop.call_soon_threadsafe(make)
    assert done.wait(WATCHDOG_S)
    return made[0]


def test_a_poster_made_on_its_loop_wakes_it_once_per_batch_through_its_socket() -> None:
    loop = CountingLoop()
    thread = _run_loop(loop)
    try:
        post = _made_on(loop)
        assert post._wakeup is not None
        release, held = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            release.wait(WATCHDOG_S)

        post(hold)
        assert held.wait(WATCHDOG_S)
        wakes = loop.wakes
        seen: list[int] = []
        done = threading.Event()
        for i in range(1_000):
            post(seen.append, i)
        post(done.set)
        assert _pending(post) == b"\0"  # one wake-up for the whole batch
        release.set()
        assert done.wait(WATCHDOG_S)
        assert seen == list(range(1_000))
        assert loop.wakes == wakes  # none through call_soon_threadsafe
        assert _pending(post) == b""  # the loop took its wake-up
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WATCHDOG_S)
        loop.close()


def test_calls_from_many_threads_through_the_socket_each_run_once_in_order() -> None:
    loop = asyncio.new_event_loop()
    thread = _run_loop(loop)
    try:
        post = _made_on(loop)
        assert post._wakeup is not None
        seen: list[tuple[int, int]] = []
        threads = [
            threading.Thread(target=lambda t=t: [post(seen.append, (t, i)) for i in range(500)])
            for t in range(4)
        ]
        for each in threads:
            each.start()
        for each in threads:
            each.join(WATCHDOG_S)
        done = threading.Event()
        post(done.set)
        assert done.wait(WATCHDOG_S)
        assert sorted(seen) == [(t, i) for t in range(4) for i in range(500)]
        for t in range(4):
            assert [i for u, i in seen if u == t] == list(range(500))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WATCHDOG_S)
        loop.close()


def test_a_poster_made_off_its_loop_wakes_it_with_call_soon_threadsafe() -> None:
    loop = CountingLoop()
    thread = _run_loop(loop)
    try:
        post = poster(loop)  # made on this thread, while the loop runs on another
        assert isinstance(post, _Batched)
        assert post._wakeup is None
        done = threading.Event()
        post(done.set)
        assert done.wait(WATCHDOG_S)
        assert loop.wakes == 1
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WATCHDOG_S)
        loop.close()


def test_a_loop_that_cannot_watch_a_socket_is_still_served() -> None:
    async def scenario() -> list[str]:
        post = poster(asyncio.get_running_loop())
        assert isinstance(post, _Batched)
        assert post._wakeup is None
        seen: list[str] = []
        done = asyncio.Event()
        threading.Thread(target=lambda: (post(seen.append, "a"), post(done.set))).start()
        await asyncio.wait_for(done.wait(), WATCHDOG_S)
        return seen

    loop = NoReaderLoop()
    try:
        assert loop.run_until_complete(scenario()) == ["a"]
    finally:
        loop.close()


def test_a_closed_loop_refuses_a_socket_poster_and_its_sockets_close_with_the_loop() -> None:
    loop = asyncio.new_event_loop()

    async def make() -> Any:
        return poster(asyncio.get_running_loop())

    post = loop.run_until_complete(make())
    assert isinstance(post, _Batched)
    wakeup = post._wakeup
    assert wakeup is not None
    loop.close()
    with pytest.raises(RuntimeError):
        post(print, "never")
    del loop, post
    gc.collect()
    assert wakeup._rsock.fileno() == -1  # closed once the loop was gone
    assert wakeup._wsock.fileno() == -1


def test_a_closed_wakeup_refuses_and_closing_twice_is_harmless() -> None:
    loop = asyncio.new_event_loop()
    woken: list[int] = []
    wakeup = Wakeup(loop, lambda: woken.append(1))
    try:
        wakeup.close(loop)
        wakeup.close(loop)
        with pytest.raises(OSError):
            wakeup.wake()
    finally:
        loop.close()


def test_a_wakeup_runs_its_reader_in_an_empty_context() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []
    loop = asyncio.new_event_loop()
    var.set("the registrant's")
    done = threading.Event()

    def reader() -> None:
        wakeup.clear()
        seen.append(var.get())
        done.set()
        loop.stop()

    wakeup = Wakeup(loop, reader)
    try:
        threading.Thread(target=wakeup.wake).start()
        loop.run_forever()
        assert done.is_set()
        assert seen == ["unset"]
    finally:
        wakeup.close(loop)
        loop.close()


def test_a_runtime_loop_thread_is_woken_through_its_socket_and_closes_it() -> None:
    loop_thread = LoopThread(name="retinue-loop-test")
    ran = threading.Event()
    assert loop_thread.call_soon(ran.set)
    assert ran.wait(WATCHDOG_S)
    wakeup = loop_thread._wakeup
    assert wakeup is not None
    loop = loop_thread._loop
    assert loop is not None
    order: list[int] = []
    done = threading.Event()
    for i in range(100):
        assert loop_thread.call_soon(order.append, i)
    assert loop_thread.call_soon(done.set)
    assert done.wait(WATCHDOG_S)
    assert order == list(range(100))
    loop_thread.shutdown(WATCHDOG_S)
    assert loop.is_closed()
    assert wakeup._rsock.fileno() == -1
    assert not loop_thread.call_soon(order.append, -1)  # stopped: refused
    assert order == list(range(100))

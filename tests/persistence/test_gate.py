"""The store's gate: reads share it, a reclaim (or a map growth) takes it alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from retinue.persistence.gate import Gate

from . import PROMPT_S


def test_the_exclusive_holder_waits_for_the_readers_and_new_readers_wait_for_it() -> None:
    gate = Gate()
    order: list[str] = []
    reading = threading.Event()
    release = threading.Event()
    waiting = threading.Event()

    def reader() -> None:
        with gate.shared():
            reading.set()
            release.wait(PROMPT_S)
            order.append("first read done")

    def replacer() -> None:
        waiting.set()
        with gate.exclusive():
            order.append("replaced")

    first = threading.Thread(target=reader)
    first.start()
    assert reading.wait(PROMPT_S)
    swap = threading.Thread(target=replacer)
    swap.start()
    assert waiting.wait(PROMPT_S)
    late = threading.Thread(target=lambda: _read(gate, order, "late read"))
    _until(lambda: gate._waiting > 0)  # the replacer is queued at the gate
    late.start()
    release.set()
    for thread in (first, swap, late):
        thread.join(PROMPT_S)
    assert order == ["first read done", "replaced", "late read"]


def _until(check: Callable[[], bool]) -> None:
    """Wait (a hang guard, not a timing assertion) until ``check()`` holds."""
    deadline = time.monotonic() + PROMPT_S
    while not check():
        assert time.monotonic() < deadline, "the state never came"
        time.sleep(0.001)


def _read(gate: Gate, order: list[str], name: str) -> None:
    with gate.shared():
        order.append(name)


def test_a_read_inside_a_read_does_not_wait_behind_a_queued_replacer() -> None:
    gate = Gate()
    inner = threading.Event()
    queued = threading.Event()

    def replacer() -> None:
        queued.set()
        with gate.exclusive():
            pass

    with gate.shared():
        assert gate.held()
        swap = threading.Thread(target=replacer)
        swap.start()
        assert queued.wait(PROMPT_S)
        _until(lambda: gate._waiting > 0)
        with gate.shared():  # would deadlock if a nested read waited for the replacer
            inner.set()
    assert not gate.held()
    swap.join(PROMPT_S)
    assert inner.is_set() and not swap.is_alive()

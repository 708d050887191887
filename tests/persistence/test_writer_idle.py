"""The store's writer keeps nothing of a commit once it is answered.

A committed group (its transitions, callbacks and what they close over) that
the writer kept while it idled would outlive its turn: with many turns in
flight the cyclic collector promoted and scanned it again and again.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import wait_until

from retinue.persistence.commits import Submission
from retinue.persistence.store import Store
from retinue.persistence.writer import Writer


class _Answered:
    """A commit's callback: sets ``done`` when called (a class, so a weak reference can
    say when it is gone)."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def __call__(self, error: BaseException | None) -> None:
        assert error is None
        self.done.set()


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    store = Store(tmp_path / "store")
    try:
        yield store._writable()
    finally:
        store.close()


def _alone(writer: Writer, answered: _Answered) -> None:
    writer.submit([("agents", b"k", b"v")], answered)


def _grouped(writer: Writer, answered: _Answered) -> None:
    group: list[Submission] = [([("agents", b"k", b"v")], answered)]
    writer.submit_group(group)


@pytest.mark.parametrize("hand_over", [_alone, _grouped], ids=["submit", "submit_group"])
def test_an_answered_commit_is_freed_while_the_writer_idles(
    writer: Writer, hand_over: Callable[[Writer, _Answered], None]
) -> None:
    gc.collect()
    gc.disable()  # freed by reference counting alone, or not at all
    try:
        answered = _Answered()
        hand_over(writer, answered)
        assert answered.done.wait(10)
        gone = weakref.ref(answered)
        del answered
        wait_until(lambda: gone() is None, what="the writer to let the answered commit go")
    finally:
        gc.enable()

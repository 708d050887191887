"""The handover ledger: take_back takes exactly what no waiter received, and nothing else."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from retinue.actors.calls import Handover


def test_an_empty_ledger_gives_nothing_back() -> None:
    ledger: Handover[str] = Handover()
    assert ledger.take_back() == []
    assert ledger.take_back(Future()) == []
    assert ledger.consume() == []


def test_what_is_received_is_not_taken_back_and_what_is_not_is() -> None:
    ledger: Handover[str] = Handover()
    a: Future[Any] = Future()
    b: Future[Any] = Future()
    ledger.hand(a, "first")
    ledger.hand(b, "second")
    assert ledger.receive(a)
    assert ledger.take_back() == ["second"]
    assert not ledger.receive(b)  # taken back first: the waiter sees nothing
    assert ledger.take_back() == []


def test_a_kept_value_is_taken_back_until_consumed() -> None:
    ledger: Handover[str] = Handover()
    a: Future[Any] = Future()
    b: Future[Any] = Future()
    ledger.hand(a, "kept")
    assert ledger.receive(a, keep=True)
    assert ledger.take_back() == ["kept"]
    ledger.hand(b, "stored")
    assert ledger.receive(b, keep=True)
    assert ledger.consume() == ["stored"]
    assert ledger.take_back() == []


def test_a_value_kept_while_taken_back_is_taken_back_exactly_once() -> None:
    """A take-back racing a keeping receive never misses the value, nor takes it twice."""
    for _ in range(300):
        ledger: Handover[int] = Handover()
        key: Future[Any] = Future()
        ledger.hand(key, 1)
        receiver = threading.Thread(target=ledger.receive, args=(key,), kwargs={"keep": True})
        receiver.start()
        first = ledger.take_back()
        receiver.join()
        second = ledger.take_back()
        assert first + second == [1]  # kept (received) or held, it is taken back once

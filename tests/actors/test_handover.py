"""The handover ledger: take_back takes exactly what no waiter received, and nothing else."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from retinue.actors.calls import Handover
from retinue.actors.calls._handover import HostLedger


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


def test_the_host_ledger_takes_back_what_no_waiter_received_in_order() -> None:
    ledger: HostLedger[str] = HostLedger()
    keys: list[Future[Any]] = [Future() for _ in range(3)]
    for key, value in zip(keys, ["first", "second", "third"], strict=True):
        ledger.hand(key, value)
    assert len(ledger) == 3
    assert ledger.receive(keys[1])
    assert not ledger.receive(keys[1])  # received once
    assert ledger.take_back() == ["first", "third"]
    assert not ledger.receive(keys[0])  # taken back first: the waiter sees nothing
    assert (ledger.take_back(), len(ledger)) == ([], 0)


def test_the_host_ledger_takes_back_each_value_with_its_key_in_order() -> None:
    """take_back_pairs: what take_back takes, each with the key it was handed on."""
    ledger: HostLedger[str] = HostLedger()
    keys: list[Future[Any]] = [Future() for _ in range(3)]
    for key, value in zip(keys, ["first", "second", "third"], strict=True):
        ledger.hand(key, value)
    assert ledger.receive(keys[1])
    assert ledger.take_back_pairs() == [(keys[0], "first"), (keys[2], "third")]
    assert not ledger.receive(keys[2])  # taken back: the waiter sees nothing
    assert (ledger.take_back_pairs(), ledger.take_back(), len(ledger)) == ([], [], 0)


def test_a_host_value_is_received_or_taken_back_never_both() -> None:
    """With no lock, a receive racing a take-back still gives each value to one side."""
    for _ in range(300):
        ledger: HostLedger[int] = HostLedger()
        keys: list[Future[Any]] = [Future() for _ in range(20)]
        for i, key in enumerate(keys):
            ledger.hand(key, i)
        received: list[int] = []

        def receive_all(ledger: HostLedger[int], keys: list[Future[Any]], got: list[int]) -> None:
            got.extend(i for i, key in enumerate(keys) if ledger.receive(key))

        receiver = threading.Thread(target=receive_all, args=(ledger, keys, received))
        receiver.start()
        taken = ledger.take_back()
        receiver.join()
        assert sorted(received + taken) == list(range(20))

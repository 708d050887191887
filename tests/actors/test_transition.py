"""A committed transition's order: its events, then its caller's answer, then its effects."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from support import tag

from retinue import TurnStarted
from retinue.actors.events import EventBus
from retinue.actors.events._bus import EventQueue
from retinue.actors.supervisor._transition import Transition
from retinue.errors import StoreError


def test_the_caller_is_answered_before_the_effects_run() -> None:
    # A spawn's turn starts in an effect: the host learns of its spawn (and can send its
    # wait) before the turn is handed to the runtime loop.
    reply: Future[Any] = Future()
    tx = Transition(reply, EventBus(16), "spawn", False)
    tx.result = "spawned"
    seen: list[tuple[bool, object]] = []
    tx.after(lambda: seen.append((reply.done(), reply.result(0) if reply.done() else None)))
    tx.committed(None)
    assert seen == [(True, "spawned")]


def test_an_exception_answer_is_raised_to_the_caller_before_the_effects_run() -> None:
    reply: Future[Any] = Future()
    tx = Transition(reply, EventBus(16), "spawn", False)
    tx.result = ValueError("refused")
    seen: list[bool] = []
    tx.after(lambda: seen.append(reply.done()))
    tx.committed(None)
    assert seen == [True]
    assert isinstance(reply.exception(0), ValueError)


def test_events_are_published_before_the_caller_is_answered() -> None:
    bus = EventBus(16)
    queue = EventQueue(16)
    bus.attach(queue)
    reply: Future[Any] = Future()
    published: list[list[str]] = []

    def on_answer(_: Future[Any]) -> None:
        with queue.cond:
            published.append([tag(e) for e in queue.take_locked(16)])

    reply.add_done_callback(on_answer)
    tx = Transition(reply, bus, "start", True)
    tx.emit(TurnStarted(agent_id="a", path="/root/a", at=1.0, generation=1))
    tx.committed(None)
    assert published == [["turn_started"]]


def test_a_deferred_reply_is_not_answered_but_the_effects_run() -> None:
    reply: Future[Any] = Future()
    tx = Transition(reply, EventBus(16), "run", False)
    ran: list[bool] = []
    tx.after(lambda: ran.append(True))
    assert tx.defer() is reply
    tx.committed(None)
    assert ran == [True]
    assert not reply.done()


def test_a_failed_commit_answers_the_caller_and_runs_no_effect() -> None:
    reply: Future[Any] = Future()
    other: Future[Any] = Future()
    tx = Transition(reply, EventBus(16), "spawn", False)
    tx.result = "spawned"
    ran: list[bool] = []
    tx.after(lambda: ran.append(True))
    tx.answer(other, "taken")
    tx.committed(OSError("disk full"))
    assert ran == []
    assert isinstance(reply.exception(0), StoreError)
    assert isinstance(other.exception(0), StoreError)

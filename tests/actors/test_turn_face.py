"""What a runner's ``Turn`` shows, and that only the runtime makes one.

A runner sees its task, messages, agent, cancellation, the coordinator
operations with their twins and ``request``; the turn's cancellation, its
executor flags, what its waits were handed and the tool layer's ``field=``
arguments are the private control's (issue 28).
"""

from __future__ import annotations

import inspect
import threading
import time

import pytest
from support import OpenRuntime, control_of, loose_turn

from retinue import Profile, Turn
from retinue.actors.turns import TurnControl

PRIVATE = (
    "cancel",
    "claim_start",
    "while_running",
    "on_cancel",
    "handover",
    "runner_started",
    "runner_returned",
    "loop_thread",
    "keeps_receipts",
    "engine",
    "watch",
    "admission",
)
OPERATIONS = (
    "spawn",
    "run",
    "run_many",
    "send",
    "wait",
    "children",
    "interrupt",
    "interrupt_tree",
    "close",
    "close_tree",
)


def test_a_turn_cannot_be_constructed_from_outside() -> None:
    with pytest.raises(TypeError, match=r"Turn has no public constructor: .*Profile.*Runtime"):
        Turn()  # type: ignore[call-arg]  # what a user would write


def test_a_runner_sees_its_turn_and_none_of_its_control(open_runtime: OpenRuntime) -> None:
    seen: dict[str, object] = {}

    def runner(turn: Turn) -> str:
        seen["private"] = [name for name in PRIVATE if hasattr(turn, name)]
        seen["public"] = (turn.task, turn.agent.path, turn.cancelled.is_set(), turn.reason)
        seen["attempt"] = turn.attempt
        return "ok"

    rt = open_runtime([Profile("w", runner=runner)])
    rt.wait(rt.spawn("w", "look", name="w").id, timeout=30)
    assert seen == {"private": [], "public": ("look", "/root/w", False, "spawn"), "attempt": 1}


@pytest.mark.parametrize("name", OPERATIONS)
def test_the_operations_take_no_field_names_and_have_twins(name: str) -> None:
    for op in (name, f"{name}_async"):
        parameters = inspect.signature(getattr(Turn, op)).parameters
        assert "field" not in parameters and "name_field" not in parameters, op
    assert inspect.iscoroutinefunction(getattr(Turn, f"{name}_async"))


def test_the_control_holds_the_turns_cancellation() -> None:
    turn = loose_turn()
    control = control_of(turn)
    assert isinstance(control, TurnControl)
    assert control.claim_start()
    assert control.cancel() is True  # its runner had started
    assert turn.cancelled.is_set()  # the runner sees it
    assert not control.while_running(lambda: None)


def test_a_claim_registers_its_cancel_hook_and_a_refused_one_does_not() -> None:
    """``claim_start(hook)``: a claimed turn calls its hook when cancelled; a turn
    cancelled before its claim is not claimed, and its hook is never called."""
    calls: list[str] = []
    control = control_of(loose_turn())
    assert control.claim_start(lambda: calls.append("claimed"))
    assert calls == []  # not cancelled yet
    assert control.cancel() is True
    assert calls == ["claimed"]
    refused = control_of(loose_turn())
    refused.cancel()
    assert not refused.claim_start(lambda: calls.append("refused"))
    refused.cancel()
    assert calls == ["claimed"] and not refused.runner_started


def test_a_runner_blocked_on_its_cancel_flag_wakes_when_the_turn_is_cancelled() -> None:
    """``turn.cancelled`` makes its Condition on first use (a wait, a set): a runner
    waiting on it before any cancel and the cancel that comes later share one."""
    turn = loose_turn()
    control = control_of(turn)
    assert isinstance(turn.cancelled, threading.Event)
    assert not turn.cancelled.is_set() and "_cond" not in vars(turn.cancelled)
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(turn.cancelled.wait(30)))
    waiter.start()
    while "_cond" not in vars(turn.cancelled):  # the waiter made it
        time.sleep(0.001)
    assert control.claim_start()
    assert control.cancel() is True
    waiter.join(30)
    assert woke == [True] and turn.cancelled.is_set()
    assert turn.cancelled.wait(0)  # set: a wait returns at once
    turn.cancelled.clear()
    assert not turn.cancelled.wait(0)
    with pytest.raises(AttributeError):
        getattr(turn.cancelled, "no_such_attribute")  # noqa: B009


def test_a_cancel_flag_makes_one_condition_when_threads_first_use_it_at_once() -> None:
    """Threads that set or wait on a fresh flag at once all share the one Condition made
    (under the global lock); the flag is an Event with no ``__getattr__`` hook (every read
    of ``is_set`` takes the interpreter's plain attribute path)."""
    for _ in range(20):
        flag = loose_turn().cancelled
        start = threading.Barrier(8)
        seen: list[object] = []

        def first_use(flag: threading.Event, start: threading.Barrier, seen: list[object]) -> None:
            start.wait()
            seen.append(flag._cond)  # type: ignore[attr-defined]

        threads = [threading.Thread(target=first_use, args=(flag, start, seen)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(seen) == 8 and all(cond is seen[0] for cond in seen)
        assert isinstance(seen[0], threading.Condition)
        assert not flag.is_set()
        flag.set()
        assert flag.is_set() and flag.wait(0)
    assert not any("__getattr__" in vars(klass) for klass in type(flag).__mro__)

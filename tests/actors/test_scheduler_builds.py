"""The objects a turn's start and end build with their slots' own setters are the objects
their classes' constructors build (equal, hashed alike, every field set)."""

from __future__ import annotations

import concurrent.futures
import dataclasses

from retinue.actors.commands import LlmStarted, LlmStep, Settle, TurnRef
from retinue.actors.supervisor._host_waits import HostWaiter, host_waiter
from retinue.actors.supervisor._scheduler import llm_started, settle_of
from retinue.actors.turns import turn_ref
from retinue.protocol.failures import TurnError
from retinue.protocol.usage import Usage


def _stored() -> bytes | None:
    return b"transcript"


def test_turn_ref_is_the_constructors_ref() -> None:
    ref = turn_ref("a" * 32, 7)
    assert type(ref) is TurnRef
    assert ref == TurnRef("a" * 32, 7)
    assert hash(ref) == hash(TurnRef("a" * 32, 7))
    assert ref != TurnRef("a" * 32, 8)
    assert (ref.agent_id, ref.generation) == ("a" * 32, 7)


def test_llm_started_is_the_constructors_value() -> None:
    usage, tree = Usage(prompt_tokens=3), Usage(completion_tokens=5, cost_usd=0.5)
    made = llm_started(_stored, usage, tree)
    assert type(made) is LlmStarted
    assert made == LlmStarted(_stored, usage, tree)
    assert made.transcript() == b"transcript"


def test_settle_of_is_the_constructors_command() -> None:
    step = LlmStep(TurnRef("b", 2), Usage(prompt_tokens=1), b"raw")
    error = TurnError("ValueError: no", "ValueError")
    for output, failed, trace, last in (("done", None, None, None), (None, error, "00-x", step)):
        made = settle_of("b", 2, output, failed, trace, last)
        assert type(made) is Settle
        assert made == Settle(TurnRef("b", 2), output, failed, trace, last)
        assert [getattr(made, f.name) for f in dataclasses.fields(Settle)] == [
            TurnRef("b", 2),
            output,
            failed,
            trace,
            last,
        ]
        # What the supervisor does with a settle (ModelState.last_step's budget failure).
        assert dataclasses.replace(made, output=None).output is None


def test_host_waiter_is_the_constructors_waiter() -> None:
    future: concurrent.futures.Future[object] = concurrent.futures.Future()
    waiter = host_waiter(future)
    assert type(waiter) is HostWaiter
    assert waiter.lease is None
    assert waiter.future is future
    assert waiter == HostWaiter(future)
    assert hash(waiter) == hash(HostWaiter(future))
    assert waiter != HostWaiter(future, "lease")
    assert waiter != HostWaiter(concurrent.futures.Future())
    try:
        waiter.lease = "x"  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("a HostWaiter must be frozen")


def test_host_waiter_with_a_lease_is_the_constructors_waiter() -> None:
    future: concurrent.futures.Future[object] = concurrent.futures.Future()
    waiter = host_waiter(future, "lease")
    assert type(waiter) is HostWaiter
    assert (waiter.future, waiter.lease) == (future, "lease")
    assert waiter == HostWaiter(future, "lease")
    assert hash(waiter) == hash(HostWaiter(future, "lease"))
    assert waiter != HostWaiter(future)

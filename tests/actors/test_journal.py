"""The journal: every change a supervisor command makes to memory can be undone exactly.

The containers are driven by random operation sequences (hypothesis, derandomized);
a rolled-back sequence leaves each container exactly as it was (order included where
the container keeps order), a kept one as the same operations on a plain container
leave it. The walker refuses state the journal cannot undo, and a live supervisor's
parts hold none.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import OpenRuntime

from retinue import Profile, Restart, Runtime, Turn
from retinue.actors import (
    FaultPlan,
    JDeque,
    JDict,
    JList,
    Journal,
    Journaled,
    JSet,
    claim,
    snapshot,
)
from retinue.actors.calls import Reply
from retinue.actors.tree._journal import _MISSING, InjectedFault, own_attribute
from retinue.testing import Gate

SETTINGS = settings(max_examples=120, derandomize=True, deadline=None)

KEYS = st.integers(0, 6)
DICT_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers()),
        st.tuples(st.just("del"), KEYS),
        st.tuples(st.just("pop"), KEYS),
        st.tuples(st.just("setdefault"), KEYS, st.integers()),
        st.tuples(st.just("update"), st.dictionaries(KEYS, st.integers(), max_size=3)),
        st.tuples(st.just("popitem")),
        st.tuples(st.just("clear")),
    ),
    max_size=25,
)


def _dict_op(target: dict[int, int], op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "set":
        target[op[1]] = op[2]
    elif kind == "del":
        if op[1] in target:
            del target[op[1]]
    elif kind == "pop":
        target.pop(op[1], None)
    elif kind == "setdefault":
        target.setdefault(op[1], op[2])
    elif kind == "update":
        target.update(op[1])
    elif kind == "popitem":
        if target:
            target.popitem()
    else:
        target.clear()


@SETTINGS
@given(start=st.dictionaries(KEYS, st.integers(), max_size=5), ops=DICT_OPS, ordered=st.booleans())
def test_a_rolled_back_dict_is_as_it_was_and_a_kept_one_as_a_plain_dict(
    start: dict[int, int], ops: list[tuple[Any, ...]], ordered: bool
) -> None:
    journal = Journal()
    journaled: JDict[int, int] = JDict(journal, start, ordered=ordered)
    plain = dict(start)
    journal.begin("Test")
    for op in ops:
        _dict_op(journaled, op)
        _dict_op(plain, op)
    assert dict(journaled) == plain
    journal.roll_back()
    assert dict(journaled) == start
    if ordered:  # arrival order comes back too
        assert list(journaled.items()) == list(start.items())
    journal.begin("Test")
    for op in ops:
        _dict_op(journaled, op)
    journal.keep()
    assert list(journaled.items()) == list(plain.items())


SEQ_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 9)),
        st.tuples(st.just("appendleft"), st.integers(0, 9)),
        st.tuples(st.just("pop")),
        st.tuples(st.just("popleft")),
        st.tuples(st.just("remove"), st.integers(0, 9)),
        st.tuples(st.just("set"), st.integers(-4, 4), st.integers(0, 9)),
        st.tuples(st.just("clear")),
    ),
    max_size=25,
)


def _seq_op(target: Any, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "append":
        target.append(op[1])
    elif kind == "appendleft":
        if isinstance(target, deque):
            target.appendleft(op[1])
        else:
            target.insert(0, op[1])
    elif kind == "pop" and target:
        target.pop()
    elif kind == "popleft" and target:
        if isinstance(target, deque):
            target.popleft()
        else:
            target.pop(0)
    elif kind == "remove" and op[1] in target:
        target.remove(op[1])
    elif kind == "set" and -len(target) <= op[1] < len(target):
        target[op[1]] = op[2]
    elif kind == "clear":
        target.clear()


@SETTINGS
@given(start=st.lists(st.integers(0, 9), max_size=6), ops=SEQ_OPS, as_deque=st.booleans())
def test_a_rolled_back_list_or_deque_is_as_it_was_in_order(
    start: list[int], ops: list[tuple[Any, ...]], as_deque: bool
) -> None:
    journal = Journal()
    journaled: Any = JDeque(journal, start) if as_deque else JList(journal, start)
    plain: Any = deque(start) if as_deque else list(start)
    journal.begin("Test")
    for op in ops:
        _seq_op(journaled, op)
        _seq_op(plain, op)
    assert list(journaled) == list(plain)
    journal.roll_back()
    assert list(journaled) == start


@SETTINGS
@given(
    start=st.sets(st.integers(0, 9), max_size=6),
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "discard", "pop", "clear"]), st.integers(0, 9)),
        max_size=20,
    ),
)
def test_a_rolled_back_set_is_as_it_was(start: set[int], ops: list[tuple[str, int]]) -> None:
    journal = Journal()
    journaled = JSet(journal, start)
    journal.begin("Test")
    for kind, item in ops:
        if kind == "add":
            journaled.add(item)
        elif kind == "discard":
            journaled.discard(item)
        elif kind == "pop" and journaled:
            journaled.pop()
        elif kind == "clear":
            journaled.clear()
    journal.roll_back()
    assert set(journaled) == start


class _Part(Journaled):
    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self.count = 0
        self.flag = False


def test_a_parts_attributes_and_a_claimed_future_are_rolled_back() -> None:
    journal = Journal()
    part = _Part(journal)
    pending, cancelled = Reply[int](), Reply[int]()
    cancelled.cancel()
    journal.begin("Test")
    part.count = 5
    part.flag = True
    part.added = "new"
    assert claim(journal, pending) is True
    assert claim(journal, cancelled) is False
    journal.roll_back()
    assert (part.count, part.flag, hasattr(part, "added")) == (0, False, False)
    assert not pending.running() and not pending.done()  # pending again: it can still be answered
    assert cancelled.cancelled()
    pending.set_result(1)  # the next claim of it works
    assert pending.result() == 1


class _Defaulted(_Part):
    label = "class"  # a class default an instance may shadow

    def describe(self) -> str:
        return "method"


def test_an_attribute_shadowing_its_class_is_rolled_back_to_the_class_value() -> None:
    """A part's old value is its own, never its class's (``own_attribute``): a name the
    class defines rolls back to the class's value when the instance had none."""
    journal = Journal()
    part = _Defaulted(journal)
    part.label = "mine"
    journal.begin("Test")
    part.label = "changed"
    part.describe = lambda: "shadow"  # type: ignore[method-assign]
    part.count = 7
    journal.roll_back()
    assert (part.label, part.describe(), part.count) == ("mine", "method", 0)
    assert "describe" not in vars(part)
    assert own_attribute(part, "label") == "mine"
    assert own_attribute(part, "describe") is _MISSING
    assert own_attribute(part, "absent") is _MISSING
    assert own_attribute(part, "count") == 0


def test_a_parts_attributes_are_journaled_without_asking_for_its_dict() -> None:
    """Setting and rolling back a part's attributes never asks for its ``__dict__`` (in
    CPython 3.11 that makes every later attribute read of the part a slow one)."""
    asked: list[str] = []

    class Watched(_Part):
        def __getattribute__(self, name: str) -> Any:
            if name == "__dict__":
                asked.append(name)
            return object.__getattribute__(self, name)

    journal = Journal()
    part = Watched(journal)
    journal.begin("Test")
    part.count = 3
    part.added = "new"
    journal.roll_back()
    assert (part.count, hasattr(part, "added")) == (0, False)
    assert asked == []


def test_a_fault_plan_fires_at_its_change_of_the_command_it_names() -> None:
    journal = Journal()
    target = JDict[int, int](journal)
    journal.fault = FaultPlan(at=3, commands=frozenset({"Spawn"}))
    journal.begin("Send")  # not the command it names: no fault
    for key in range(5):
        target[key] = key
    journal.keep()
    journal.begin("Spawn")
    target[10] = 10
    target[11] = 11
    with pytest.raises(InjectedFault):
        target[12] = 12
    assert 12 not in target  # the change the fault stopped was not made
    journal.roll_back()
    assert sorted(target) == [0, 1, 2, 3, 4]
    assert journal.fault is None  # one shot


def test_a_signal_waits_for_the_command_to_be_kept_and_a_held_lock_until_it_ends() -> None:
    journal = Journal()
    sent: list[str] = []
    journal.begin("Test")
    journal.on_keep(lambda: sent.append("cancel"))
    journal.roll_back()
    assert sent == []
    import threading

    lock = threading.RLock()
    journal.begin("Test")
    journal.hold(lock)
    journal.on_keep(lambda: sent.append("cancel"))
    taken = threading.Event()

    def other() -> None:
        with lock:
            taken.set()

    thread = threading.Thread(target=other)
    thread.start()
    assert not taken.wait(0.05)  # another thread waits while the command runs
    journal.keep()
    assert taken.wait(10)
    thread.join()
    assert sent == ["cancel"]


@dataclasses.dataclass
class _Mutable:
    items: list[int]


@pytest.mark.parametrize("state", [{}, [], set(), deque(), _Mutable([])])
def test_the_walker_refuses_state_the_journal_cannot_undo(state: object) -> None:
    part = _Part(Journal())
    part.held = state
    with pytest.raises(TypeError, match=r"cannot undo|mutable"):
        snapshot(part)


def _park(turn: Turn) -> str:
    turn.run_many([("leaf", "a"), ("leaf", "b")], timeout=30)
    return "done"


def test_every_part_of_a_live_supervisor_holds_journaled_state_only(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    """With turns queued, running, waiting, restarting and host waits blocked, the walker
    reads every part of the supervisor without meeting a plain mutable container."""

    def flaky(turn: Turn) -> str:
        raise ConnectionError("down")

    rt = open_runtime(
        [
            Profile("lead", runner=_park, subagents=["leaf"]),
            Profile("leaf", runner=gate),
            Profile("flaky", runner=flaky, restart=Restart(max_restarts=5, backoff_s=60)),
        ],
        max_active_turns=2,
    )
    rt.spawn("lead", "go")
    rt.spawn("leaf", "queued")
    rt.spawn("flaky", "x")
    rt.send(rt.spawn("leaf", "mail").id, "hello")
    core = rt._system.core  # type: ignore[union-attr]
    assert core is not None
    picture = core.rescue.picture()
    assert picture == core.rescue.picture()  # the same state reads the same
    gate.release()


def test_every_part_of_a_live_supervisor_keeps_fewer_than_30_attributes(
    open_runtime: OpenRuntime,
) -> None:
    """CPython 3.11 holds at most 29 attributes of an instance in its class's shared inline
    values; one more and they live in a real dict, whose every read misses the specializing
    interpreter (hundreds a turn). A part (the tree above all) that needs more holds some
    apart (``Tree.paging``, ``Tree.shares``)."""
    rt = open_runtime([Profile("leaf", runner=lambda turn: "ok")])
    rt.run("leaf", "go", timeout=30)
    core = rt._system.core  # type: ignore[union-attr]
    assert core is not None
    parts: list[object] = [*core.rescue.parts, core.world.tree, core.world.history]
    parts += [core.world.tree.paging, core.world.tree.shares]
    crowded = {type(part).__name__: len(vars(part)) for part in parts if len(vars(part)) > 29}
    assert crowded == {}


def test_open_a_runtime_with_no_profiles(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[]) as rt:
        rt._system.core.rescue.picture()  # type: ignore[union-attr]

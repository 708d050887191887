"""The structs a turn builds by the thousand stay out of the cyclic garbage collector.

A struct type made with ``gc=False`` is allocated outside the collector: building one
adds nothing to the young generation's count (a collection starts after 700 more
allocations than deallocations), and one kept in a queue or a buffer is never scanned.
Only structs that can never be part of a reference cycle may be such: frozen, holding
strings, numbers, other such structs and tuples of them.
"""

from __future__ import annotations

import gc
import typing
from collections.abc import Callable, Iterator

import msgspec
import pytest

from retinue.actors.admission._gate import CallOwner
from retinue.actors.commands import LlmStep, TurnRef
from retinue.protocol.messages import Event, ToolCallInDoubt, TurnStarted
from retinue.protocol.usage import Usage

EVENT_KINDS = typing.get_args(Event)


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """The collector paused (so its count only grows), then restored as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _young_count_of(build: Callable[[int], object], n: int = 200) -> int:
    """How much building ``n`` objects (kept) grows the young generation's count."""
    kept: list[object] = [None] * n  # made before counting: the loop only builds
    before = gc.get_count()[0]
    for i in range(n):
        kept[i] = build(i)
    return gc.get_count()[0] - before


@pytest.mark.parametrize("kind", EVENT_KINDS, ids=lambda k: k.__name__)
def test_every_event_kind_is_outside_the_collector(kind: type[msgspec.Struct]) -> None:
    # Inherited from the events' base: a new kind is out of it too, unless it says otherwise.
    assert kind.__struct_config__.gc is False


def test_no_event_field_can_hold_a_container() -> None:
    # What makes gc=False safe: an event holds only scalars (and None), no container that
    # could refer back to it. A new field of another type must be judged first.
    scalars = (str, int, float, bool, type(None))
    for kind in EVENT_KINDS:
        for field in msgspec.structs.fields(kind):
            hint = field.type
            args = typing.get_args(hint) or (hint,)
            for arg in args:
                assert isinstance(arg, type), (kind.__name__, field.name, hint)
                assert issubclass(arg, scalars), (kind.__name__, field.name, hint)


def test_building_events_adds_nothing_to_the_collector_count(collector_paused: None) -> None:
    grown = _young_count_of(lambda i: TurnStarted(agent_id="a", path="/a", at=1.0, generation=i))
    assert grown < 50  # 200 if each event were a collector object


def test_decoded_events_are_outside_the_collector_too(collector_paused: None) -> None:
    wire = msgspec.json.encode(TurnStarted(agent_id="a", path="/a", at=1.0, generation=1))
    decoder = msgspec.json.Decoder(Event)
    grown = _young_count_of(lambda i: decoder.decode(wire))
    assert grown < 50
    assert decoder.decode(wire) == TurnStarted(agent_id="a", path="/a", at=1.0, generation=1)


def test_a_model_step_and_a_call_owner_are_outside_the_collector(collector_paused: None) -> None:
    assert LlmStep.__struct_config__.gc is False
    assert CallOwner.__struct_config__.gc is False
    sender = TurnRef("a", 1)
    usage = Usage()
    in_doubt = (
        ToolCallInDoubt(
            agent_id="a",
            path="/a",
            at=1.0,
            tool="t",
            call_id="c",
            effect="write",
            idempotency_key="k",
            action="retry",
        ),
    )
    grown = _young_count_of(lambda i: LlmStep(sender, usage, b"t", open_calls=i, in_doubt=in_doubt))
    assert grown < 50
    grown = _young_count_of(lambda i: CallOwner("a", "/a", "m"))
    assert grown < 50
    step = LlmStep(sender, usage, b"t", in_doubt=in_doubt)
    assert step.in_doubt == in_doubt and step.sender is sender  # a struct as before

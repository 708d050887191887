"""An agent record is stored without its default-valued fields, and reads back whole."""

from __future__ import annotations

import msgspec

from persistence import agent
from retinue.protocol.messages import AgentState, Usage
from retinue.protocol.records import AgentRecord


def test_an_agent_record_is_stored_without_its_defaults_and_decodes_equal() -> None:
    record = agent("a" * 32, "/root/a", state=AgentState.RUNNING, started_at=5.0)
    raw = msgspec.msgpack.encode(record)
    stored = msgspec.msgpack.decode(raw)  # as a plain map: which fields were written
    assert "output" not in stored and "usage" not in stored and "host_received" not in stored
    assert stored["started_at"] == 5.0 and stored["state"] == "running"
    assert msgspec.msgpack.decode(raw, type=AgentRecord) == record
    spent = msgspec.structs.replace(record, usage=Usage(prompt_tokens=3), output="done")
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(spent))
    assert again["output"] == "done" and "usage" in again
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(spent), type=AgentRecord) == spent


def test_an_agent_record_stored_with_every_field_decodes_the_same() -> None:
    """A store written before the defaults were left out holds every field."""
    record = agent("a" * 32, "/root/a", state=AgentState.COMPLETED)
    every = {name: getattr(record, name) for name in AgentRecord.__struct_fields__}
    raw = msgspec.msgpack.encode(every)
    assert len(msgspec.msgpack.decode(raw)) == len(AgentRecord.__struct_fields__)
    assert msgspec.msgpack.decode(raw, type=AgentRecord) == record

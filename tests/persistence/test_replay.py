"""Inputs a turn received before a crash killed it are handed to the next turn again."""

from __future__ import annotations

from pathlib import Path

import msgspec

from retinue import Profile, Runtime
from retinue.protocol.records import CompletionRecord, MessageRecord

from . import (
    Recorder,
    agent,
    agent_write,
    completion,
    completion_write,
    decode_db,
    message,
    message_write,
    write_store,
)


def test_inputs_of_a_killed_turn_reach_the_resumed_turn(tmp_path: Path) -> None:
    store = tmp_path / "store"
    lead = agent("lead", "/root/lead", state="running", generation=2, profile="lead")
    kid = agent("kid", "/root/lead/kid", "lead", profile="worker")
    # Read by generation 2 (the turn the crash killed), and by generation 1 (settled).
    killed_msg = msgspec.structs.replace(
        message(lead, 5, "read by the killed turn", read=True), read_generation=2
    )
    old_msg = msgspec.structs.replace(
        message(lead, 3, "read by an earlier turn", read=True), read_generation=1
    )
    kid_done = msgspec.structs.replace(
        completion(kid, 1, 4, recipient_id="lead", delivered=True), delivered_generation=2
    )
    write_store(
        store,
        [
            agent_write(lead),
            agent_write(kid),
            message_write(killed_msg),
            message_write(old_msg),
            completion_write(kid_done),
        ],
    )
    recorder = Recorder()
    profiles = [
        Profile("lead", subagents=["worker"], runner=recorder),
        Profile("worker", runner=recorder),
    ]
    with Runtime.open(store, profiles=profiles) as rt:
        assert rt.get("lead").state == "interrupted"
        assert recorder.count() == 0, "restore must not run anything"
        rt.resume("lead")
        rt.wait("lead", timeout=10)  # the interrupted completion of generation 2
        done = rt.wait("lead", timeout=10)
        assert done.generation == 3 and done.status == "completed"
        (turn,) = recorder.of("lead")
        assert [(m.kind, m.id) for m in turn.messages] == [
            ("completion", "kid:1"),
            ("message", "lead:5"),
        ]
    # Read again by generation 3 now, and the earlier turn's message stays read.
    messages = decode_db(store, "messages", MessageRecord)
    by_seq = {r.seq: r for r in messages.values()}
    assert by_seq[5].read and by_seq[5].read_generation == 3
    assert by_seq[3].read and by_seq[3].read_generation == 1
    (kid_record,) = [
        r
        for r in decode_db(store, "completions", CompletionRecord).values()
        if r.completion.agent_id == "kid"
    ]
    assert kid_record.delivered and kid_record.delivered_generation == 3

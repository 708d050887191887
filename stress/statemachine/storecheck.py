"""Reading a closed store and comparing it with the model."""

from __future__ import annotations

from pathlib import Path

import msgspec

from retinue import AgentInfo
from retinue.persistence.migrations import indexed
from retinue.persistence.store import Store
from retinue.protocol.records import AgentRecord, CompletionRecord, MessageRecord
from stress.statemachine.model import Model
from stress.statemachine.trace import fail


class StoreCheck(Model):
    """The comparison of a store no runtime holds with the model."""

    def check_store(
        self,
        expected: dict[str, AgentInfo],
        records: dict[str, AgentRecord],
        completions: dict[tuple[str, int], CompletionRecord],
        messages: dict[str, MessageRecord],
    ) -> None:
        """Compare the closed store with the model (see :meth:`reopen`)."""
        if set(records) != set(expected):
            fail(f"store agents differ from the runtime's: {set(records) ^ set(expected)}")
        delivered = self.delivered()
        read = {i for ids in self.received_messages().values() for i in ids}
        for agent_id, record in records.items():
            agent, info = self.agents[agent_id], expected[agent_id]
            got = (record.path, record.parent_id, record.state, record.generation, record.output)
            want = (info.path, agent.parent_id, info.state, info.generation, info.output)
            if got != want or record.error != info.error or record.task != info.task:
                fail(f"store has {record}; expected {info} (parent {agent.parent_id})")
            stored_got = set(range(1, record.host_received + 1)) - set(record.host_returned)
            if stored_got != agent.host_got:
                fail(
                    f"{record.path}: store says the host received generations "
                    f"{sorted(stored_got)}, the host received {sorted(agent.host_got)}"
                )
            gens = sorted(g for a, g in completions if a == agent_id)
            if gens != list(range(1, record.generation + 1)):
                fail(f"{record.path}: completions {gens} for generation {record.generation}")
            for gen in gens:
                stored = completions[(agent_id, gen)]
                done = stored.completion
                if done.id != f"{agent_id}:{gen}" or done.agent_id != agent_id:
                    fail(f"completion stored under {agent_id}:{gen} is {done}")
                if stored.delivered != (done.id in delivered):
                    fail(
                        f"completion {done.id} delivered={stored.delivered} in the store, "
                        f"but the model says {done.id in delivered}"
                    )
                if not stored.delivered and stored.recipient_id != self.heir(agent):
                    fail(
                        f"pending completion {done.id} is routed to {stored.recipient_id}, "
                        f"not the nearest live ancestor {self.heir(agent)}"
                    )
                self.check_completion(done, "store")
            if gens and record.state.settled:
                last = completions[(agent_id, gens[-1])].completion
                if str(last.status) != str(record.state):
                    fail(f"{record.path} is {record.state} but its last completion is {last}")
        sent = {m.id: m for a in self.agents.values() for m in self.inbox(a)}
        sent.update((m.id, m) for m in self.host_inbox())
        read |= set(self.host_inbox_ledger)
        if set(messages) != set(sent):
            fail(f"store messages differ from the sent ones: {set(messages) ^ set(sent)}")
        for message_id, stored_message in messages.items():
            if stored_message.message != sent[message_id]:
                fail(f"message {message_id} changed in the store: {stored_message.message}")
            if stored_message.read != (message_id in read):
                fail(f"message {message_id} read={stored_message.read}; turns say otherwise")


def identity(info: AgentInfo) -> tuple[object, ...]:
    """What never changes of an agent: id, name, path, profile, parent and depth."""
    return (info.id, info.name, info.path, info.profile, info.parent_path, info.depth)


def fixed(info: AgentInfo) -> tuple[object, ...]:
    """What a reopen keeps of a settled agent: its identity, state, turn and result."""
    return (
        *identity(info),
        info.state,
        info.generation,
        info.task,
        info.output,
        info.error,
        info.created_at,
    )


def read_store(
    path: Path,
) -> tuple[
    dict[str, AgentRecord], dict[tuple[str, int], CompletionRecord], dict[str, MessageRecord]
]:
    """Read every agent, completion and message of a store no runtime holds (its
    ``undelivered`` index checked against the completions)."""
    store = Store(path, readonly=True)
    try:
        snap = store.snapshot(["agents", "completions", "messages", "undelivered"])
    finally:
        store.close()
    index = {key for key, _ in snap.records["undelivered"]}
    scan = {key for key, value in snap.records["completions"] if indexed(value)}
    if index != scan:
        fail(f"the undelivered index differs from the completions: {sorted(index ^ scan)}")
    agents = msgspec.msgpack.Decoder(AgentRecord)
    completions = msgspec.msgpack.Decoder(CompletionRecord)
    messages = msgspec.msgpack.Decoder(MessageRecord)
    records = {r.id: r for r in (agents.decode(v) for _, v in snap.records["agents"])}
    done: dict[tuple[str, int], CompletionRecord] = {}
    for key, value in snap.records["completions"]:
        record = completions.decode(value)
        slot = (record.completion.agent_id, record.completion.generation)
        if slot in done:
            fail(f"two stored completions for {slot} (key {key!r})")
        done[slot] = record
    mail = {m.message.id: m for m in (messages.decode(v) for _, v in snap.records["messages"])}
    return records, done, mail

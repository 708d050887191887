"""The tree's completions: every known one per agent, and the undelivered ones per recipient.

:class:`CompletionIndex` is one family of :class:`~retinue.actors.tree.Tree`'s
indexes (the tree is made of it), never used alone: only the tree's methods
edit these indexes, and every edit records its store write in the tree's
``writes``.
"""

from __future__ import annotations

import msgspec

from retinue.actors.tree._journal import JDict, Journal
from retinue.actors.tree._keys import HOST_KEY, recipient_key
from retinue.persistence.store import Write
from retinue.protocol.messages import Completion
from retinue.protocol.records import AgentRecord, CompletionRecord, completion_key

__all__ = ["CompletionIndex"]

_encode = msgspec.msgpack.Encoder().encode


class CompletionIndex:
    """Completions indexed for routing (a part of :class:`~retinue.actors.tree.Tree`)."""

    agents: dict[str, AgentRecord]  # the tree's agents
    writes: list[Write]  # the tree's gathered writes
    _journal: Journal

    def __init__(self) -> None:
        """Start with no completion."""
        journal = self._journal
        # Undelivered completions per recipient key, in routing order.
        self.pending: dict[str, dict[str, CompletionRecord]] = JDict(
            journal, {HOST_KEY: JDict(journal, ordered=True)}
        )
        # Every known completion per agent and generation.
        self.completions: dict[str, dict[int, CompletionRecord]] = JDict(journal)
        self.undelivered: dict[str, int] = JDict(journal)

    def _queue(self, key: str) -> dict[str, CompletionRecord]:
        """Return the pending queue of recipient ``key``, made if it has none."""
        queue = self.pending.get(key)
        if queue is None:
            queue = self.pending[key] = JDict(self._journal, ordered=True)
        return queue

    def _known(self, agent_id: str) -> dict[int, CompletionRecord]:
        """Return the known completions of ``agent_id``, made if it has none."""
        known = self.completions.get(agent_id)
        if known is None:
            known = self.completions[agent_id] = JDict(self._journal, ordered=True)
        return known

    def add_completion(self, record: CompletionRecord, *, persist: bool = True) -> None:
        """Store a completion and, while undelivered, queue it for its recipient."""
        completion = record.completion
        self._known(completion.agent_id)[completion.generation] = record
        if not record.delivered:
            key = recipient_key(record.recipient_id)
            self._queue(key)[completion.id] = record
            self.undelivered[completion.agent_id] = self.undelivered.get(completion.agent_id, 0) + 1
        if persist:
            self._write_completion(record)

    def _write_completion(self, record: CompletionRecord) -> None:
        completion = record.completion
        self.writes.append(
            (
                "completions",
                completion_key(completion.agent_id, completion.generation),
                _encode(record),
            )
        )

    def _unqueue(self, record: CompletionRecord) -> None:
        """Take a completion off its recipient's queue; an emptied queue goes too."""
        key = recipient_key(record.recipient_id)
        queued = self.pending.get(key)
        if queued is not None:
            queued.pop(record.completion.id, None)
            if not queued and key != HOST_KEY:
                del self.pending[key]

    def mark_delivered(self, record: CompletionRecord) -> CompletionRecord:
        """Mark a pending completion received by its recipient."""
        completion = record.completion
        self._unqueue(record)
        self.undelivered[completion.agent_id] -= 1
        recipient = None if record.recipient_id is None else self.agents.get(record.recipient_id)
        generation = 0 if recipient is None else recipient.generation
        done = msgspec.structs.replace(record, delivered=True, delivered_generation=generation)
        self.completions[completion.agent_id][completion.generation] = done
        self._write_completion(done)
        return done

    def undeliver(self, record: CompletionRecord) -> CompletionRecord:
        """Put a delivered completion back in its recipient's pending queue."""
        completion = record.completion
        back = msgspec.structs.replace(record, delivered=False, delivered_generation=0)
        self._queue(recipient_key(record.recipient_id))[completion.id] = back
        self.undelivered[completion.agent_id] = self.undelivered.get(completion.agent_id, 0) + 1
        self.completions[completion.agent_id][completion.generation] = back
        self._write_completion(back)
        return back

    def reroute(self, record: CompletionRecord, recipient_id: str | None) -> CompletionRecord:
        """Move a pending completion to another recipient."""
        completion = record.completion
        self._unqueue(record)
        moved = msgspec.structs.replace(record, recipient_id=recipient_id)
        self._queue(recipient_key(recipient_id))[completion.id] = moved
        self.completions[completion.agent_id][completion.generation] = moved
        self._write_completion(moved)
        return moved

    def pending_for(self, recipient_id: str | None) -> list[CompletionRecord]:
        """Return the completions waiting for a recipient, in routing order."""
        return list(self.pending.get(recipient_key(recipient_id), {}).values())

    def remove_completion(self, agent_id: str, generation: int) -> None:
        """Delete one stored completion of an agent."""
        del self.completions[agent_id][generation]
        self.writes.append(("completions", completion_key(agent_id, generation), None))

    def _untag_delivered(self, done: Completion, generation: int) -> None:
        """Drop the receiving turn ``generation``'s tag from a delivered completion."""
        record = self.completions.get(done.agent_id, {}).get(done.generation)
        if record is not None and record.delivered_generation == generation:
            record = msgspec.structs.replace(record, delivered_generation=0)
            self.completions[done.agent_id][done.generation] = record
            self._write_completion(record)

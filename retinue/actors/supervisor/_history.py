"""The generations a fork can start from: each agent's newest settled ones.

Every settled generation (a completion of any kind, a failed attempt its
restart policy restarts, a turn lost in a crash) is kept as a
:class:`~retinue.protocol.records.GenerationRecord`: the agent's record as
the generation ended, when it ended, and the span of the turn that ended it.

The newest rides on the agent's record, which the settle writes anyway: a
completion stamps the record with how its generation ended
(:class:`~retinue.protocol.records.GenerationEnd`, :meth:`History.ended`),
and that record and stamp are the generation's record for as long as it is
the agent's newest, closed or not. Only when a newer generation starts (a
follow-up, a wake, a resume: :meth:`History.leave`) is it written on its own,
in the same transition; a restarted attempt's is written as it ends
(:meth:`History.settled`). So an agent spawned, run and closed writes none:
a lifecycle pays no write of its own and dirties no page of the store for it.

The store keeps the newest ``Limits.fork_generations`` of each agent: writing
generation ``g`` deletes ``g - fork_generations``, the reads hide any older
than the newest settled minus ``fork_generations``, and compaction removes an
agent's with the agent (:meth:`~retinue.actors.tree.Tree.remove_agents`).

A fork reads them on the supervisor's thread, which may serve a fork before
the writer has committed what it served just before. So the records (and the
deletes) of transitions not yet committed are held here too, until a later
read finds their commit done: a read sees every generation the supervisor has
settled, committed or not. Supervisor thread only.
"""

from __future__ import annotations

import concurrent.futures
import time

import msgspec

from retinue.actors import JDict, Journaled
from retinue.actors.supervisor._transition import Transition, resolve_future
from retinue.actors.tree import Tree
from retinue.persistence.store import Store
from retinue.protocol.limits import Limits
from retinue.protocol.records import (
    AgentRecord,
    GenerationEnd,
    GenerationRecord,
    generation_key,
)

__all__ = ["History"]

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(GenerationRecord).decode

Held = tuple[GenerationRecord | None, concurrent.futures.Future[None]]
"""A write not known committed yet: the record (None: a delete) and its commit's future."""


class History(Journaled):
    """Each agent's newest settled generations: written, held until committed, read back."""

    _config = frozenset({"tree", "store", "limits"})

    def __init__(self, tree: Tree, store: Store, limits: Limits) -> None:
        """Keep the generations of ``tree``'s agents in ``store``, ``limits.fork_generations``
        per agent."""
        self._journal = tree.journal
        self.tree = tree
        self.store = store
        self.limits = limits
        # Generation key -> what a transition not yet known committed wrote, oldest first.
        self.unconfirmed: dict[bytes, Held] = JDict(tree.journal, ordered=True)

    def settled(
        self,
        tx: Transition,
        record: AgentRecord,
        *,
        span: str | None = None,
        at: float | None = None,
        committed: bool = False,
    ) -> GenerationRecord:
        """Write ``record`` as its generation ended (``at``: now) and forget the generation
        ``fork_generations`` older; return what is kept (a restarted attempt's end, which
        no record carries: see :meth:`ended` for a generation that completes the task).

        ``span`` is the W3C ``traceparent`` of the turn that ended it (None: unknown);
        ``committed``: the writes are committed before anything is served (a
        recovery's), so nothing is held here.
        """
        kept = GenerationRecord(
            agent=record, settled_at=time.time() if at is None else at, span=span
        )
        self._write(tx, kept, committed=committed)
        return kept

    def ended(self, record: AgentRecord, *, span: str | None = None, at: float) -> AgentRecord:
        """Stamp ``record``'s agent with how its current generation ended (its state now,
        ``at``, ``span``) and return its record as stored: the settle's own write of the
        record keeps the generation (nothing else is written, see the module docstring)."""
        current = self.tree.agents.get(record.id, record)
        end = GenerationEnd(generation=current.generation, state=current.state, at=at, span=span)
        return self.tree.put_agent(msgspec.structs.replace(current, ended=end))

    def leave(self, tx: Transition, record: AgentRecord) -> None:
        """``record``'s agent starts a newer generation: write the one its record carries
        (if it does) as a :class:`GenerationRecord` in ``tx``, before the record moves on."""
        kept = _carried(self.tree.agents.get(record.id, record))
        if kept is not None:
            self._write(tx, kept, committed=False)

    def _write(self, tx: Transition, kept: GenerationRecord, *, committed: bool) -> None:
        """Write ``kept`` and delete the generation ``fork_generations`` older (held until
        ``tx`` commits unless ``committed``)."""
        record = kept.agent
        key = generation_key(record.id, record.generation)
        writes: list[tuple[bytes, GenerationRecord | None]] = [(key, kept)]
        old = record.generation - self.limits.fork_generations
        if old >= 1:
            writes.append((generation_key(record.id, old), None))
        for write_key, value in writes:
            self.tree.writes.append(
                ("generations", write_key, None if value is None else _encode(value))
            )
        if not committed:
            self._hold(tx, writes)

    def __journal_snapshot__(self) -> object:
        """The picture of the held writes: keys, records and which commit each awaits.

        A commit's future resolves on the writer's thread whenever the commit is
        done, concurrently with any command, so its state is no part of the
        supervisor's memory (a rolled-back command's picture would differ by it).
        """
        return [(key, value, id(done)) for key, (value, done) in dict.items(self.unconfirmed)]

    def _hold(self, tx: Transition, writes: list[tuple[bytes, GenerationRecord | None]]) -> None:
        """Hold ``writes`` until ``tx`` is committed (its commit resolves their future)."""
        self._prune()
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        tx.after(lambda: resolve_future(done, None))
        for key, value in writes:
            self.unconfirmed.pop(key, None)  # a key written again goes to the end
            self.unconfirmed[key] = (value, done)

    def _prune(self) -> None:
        """Forget the held writes whose commit is done (commits are in order: oldest first)."""
        held = self.unconfirmed
        while held:
            key = next(iter(held))
            if not held[key][1].done():
                return
            del held[key]

    def get(self, agent_id: str, generation: int) -> GenerationRecord | None:
        """Return ``agent_id``'s kept ``generation`` (None: not kept).

        Raises:
            StoreCorrupted, StoreError: the store could not be read.
        """
        record = self.tree.agents.get(agent_id)
        if record is not None:
            if generation == record.generation:
                current = _carried(record)
                if current is not None:
                    return current
            if generation <= _newest_settled(record) - self.limits.fork_generations:
                return None  # older than the newest fork_generations (maybe not yet deleted)
        self._prune()
        key = generation_key(agent_id, generation)
        held = self.unconfirmed.get(key)
        if held is not None:
            return held[0]
        raw = self.store.get("generations", key)
        if raw is None:
            return None
        try:
            return _decode(raw)
        except msgspec.DecodeError:  # a damaged record: as if it were not kept
            return None

    def kept(self, record: AgentRecord) -> list[GenerationRecord]:
        """Return the generations of ``record``'s agent the store keeps, oldest first.

        Raises:
            StoreCorrupted, StoreError: the store could not be read.
        """
        newest = record.generation
        oldest = max(1, newest - self.limits.fork_generations)
        found = [self.get(record.id, g) for g in range(oldest, newest + 1)]
        return [g for g in found if g is not None]


def _carried(record: AgentRecord) -> GenerationRecord | None:
    """The generation ``record`` carries (:attr:`~AgentRecord.ended` of its current
    generation) as its :class:`GenerationRecord`, the agent as that generation ended
    (its settled state, not closed); None if it carries none."""
    end = record.ended
    if end is None or end.generation != record.generation:
        return None
    agent = msgspec.structs.replace(record, state=end.state, closed_at=None, ended=None)
    return GenerationRecord(agent=agent, settled_at=end.at, span=end.span)


def _newest_settled(record: AgentRecord) -> int:
    """The newest generation of ``record``'s agent that settled (0: none)."""
    end = record.ended
    if (end is not None and end.generation == record.generation) or record.state.settled:
        return record.generation
    return record.generation - 1

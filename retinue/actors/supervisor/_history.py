"""The generations a fork can start from: each agent's newest settled ones, kept in the store.

Every settled generation (a completion of any kind, a failed attempt its
restart policy restarts, a turn lost in a crash) is kept as a
:class:`~retinue.protocol.records.GenerationRecord`: the agent's record as
the generation ended, when it ended, and the span of the turn that ended it.
The store keeps the newest ``Limits.fork_generations`` of each agent: writing
generation ``g`` deletes ``g - fork_generations``, and compaction removes an
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
from retinue.protocol.records import AgentRecord, GenerationRecord, generation_key

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
        """Keep ``record`` as its generation ended (``at``: now) and forget the generation
        ``fork_generations`` older; return what is kept.

        ``span`` is the W3C ``traceparent`` of the turn that ended it (None: unknown);
        ``committed``: the writes are committed before anything is served (a
        recovery's), so nothing is held here.
        """
        kept = GenerationRecord(
            agent=record, settled_at=time.time() if at is None else at, span=span
        )
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
        return kept

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

"""The tree's completions: the known ones per agent, and the undelivered ones per recipient.

:class:`CompletionIndex` is one family of :class:`~retinue.actors.tree.Tree`'s
indexes (the tree is made of it), never used alone: only the tree's methods
edit these indexes, and every edit records its store write in the tree's
``writes`` (with the store's ``undelivered`` index kept in step: a
completion's key is in it exactly while the completion is undelivered).

A tree with a store to read (``stored``) holds only part of the completions:
those an open found undelivered, and every completion of each agent whose
completions this run changed, or asked for lately. An agent's completions
are read from the store (all at once, :meth:`CompletionIndex.known`) the
first time they are asked for, and merged under what memory holds: memory
keeps every change this run made, committed or not, for the rest of the run,
so the store is never read back in an older form. Nothing removes a
completion from memory without its agent's completions being read first, so
no removal is undone by a later read either. Agents read and never changed
are forgotten past :data:`READ_CACHE` (the store has them as read). The reads
fill journaled containers: a command that fails forgets what it read with the
rest of its changes.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from retinue.actors.tree._journal import _MISSING, JDict, Journal, Journaled, JSet, _restore_item
from retinue.actors.tree._keys import HOST_KEY, recipient_key
from retinue.actors.tree._stored import StoredCompletions
from retinue.persistence.store import Write
from retinue.protocol.messages import Completion
from retinue.protocol.records import AgentRecord, CompletionRecord, completion_key

__all__ = ["READ_CACHE", "CompletionIndex", "StoredShare"]

READ_CACHE = 4096
"""How many agents' completions memory holds for reads alone (a host wait on a settled
agent, a compaction's look at old generations): the oldest read is forgotten past it."""

_encode = msgspec.msgpack.Encoder().encode
_get = dict.get  # a dict's own get and set, not a journaled one's (see add_completion)
_set = dict.__setitem__
_new = dict.setdefault  # a key the dict does not hold (a method call: cheaper than _set)
_NONE: Mapping[int, CompletionRecord] = {}


def _by_generation(found: list[CompletionRecord]) -> dict[int, CompletionRecord]:
    """Return the completions ``found`` by generation."""
    return {record.completion.generation: record for record in found}


class StoredShare(Journaled):
    """Which agents' completions memory holds only in part, or only for reads, of those the
    store keeps: the completion index's attribute ``shares``.

    Held apart from the tree so that the tree keeps fewer than 30 attributes (see
    :class:`~retinue.actors.tree._pages.PageKeys`).
    """

    def __init__(self, journal: Journal) -> None:
        """Start with none."""
        self._journal = journal
        # Agents whose completions in memory are the ones an open loaded (the store may
        # hold more: read when asked for).
        self.partial: set[str] = JSet(journal)
        # Agents whose completions memory holds only because a read asked for them (none
        # undelivered, none written this run), oldest read first: at most READ_CACHE.
        self.read_only: dict[str, None] = JDict(journal)
        # Agents whose old generations a compaction read and found nothing more to remove.
        self.swept: set[str] = JSet(journal)


class CompletionIndex:
    """Completions indexed for routing (a part of :class:`~retinue.actors.tree.Tree`)."""

    agents: dict[str, AgentRecord]  # the tree's agents
    writes: list[Write]  # the tree's gathered writes
    seq: int  # the tree's last arrival sequence number
    _journal: Journal

    def __init__(self) -> None:
        """Start with no completion."""
        journal = self._journal
        # Undelivered completions per recipient key, in routing order.
        self.pending: dict[str, dict[str, CompletionRecord]] = JDict(
            journal, {HOST_KEY: JDict(journal, ordered=True)}
        )
        # The known completions per agent and generation: all of the agent's, or (an
        # agent in ``partial``) the ones an open loaded; an agent absent has none
        # outside the store.
        self.completions: dict[str, dict[int, CompletionRecord]] = JDict(journal)
        self.undelivered: dict[str, int] = JDict(journal)
        self.stored: StoredCompletions | None = None  # None: memory holds every completion
        self.shares = StoredShare(journal)

    @property
    def partial(self) -> set[str]:
        """Agents whose completions in memory are only those an open loaded."""
        return self.shares.partial

    @property
    def read_only(self) -> dict[str, None]:
        """Agents whose completions memory holds for reads alone, oldest read first."""
        return self.shares.read_only

    @property
    def swept(self) -> set[str]:
        """Agents whose old generations a compaction found nothing more to remove of."""
        return self.shares.swept

    def known(self, agent_id: str) -> Mapping[int, CompletionRecord]:
        """Return every completion of ``agent_id`` by generation (read from the store
        the first time this run asks; an agent no longer in the tree has none, nor one
        whose first turn has not settled).

        Raises:
            StoreCorrupted, StoreError: the store read failed.
        """
        mine = self.completions.get(agent_id)
        record = dict.get(self.agents, agent_id)  # a held one's, in C (most asked for are)
        if record is None:
            record = self.agents.get(agent_id)
        if self.stored is None or record is None:
            return _NONE if mine is None else mine
        if mine is not None and agent_id not in self.shares.partial:
            return mine
        if mine is None and record.generation <= 1 and record.state.busy:
            return _NONE  # its one generation is still to settle: no completion yet
        return self._read_stored(agent_id, mine)

    def completion(self, agent_id: str, generation: int) -> CompletionRecord | None:
        """Return the completion of ``agent_id``'s turn ``generation`` (None: there is none).

        Raises:
            StoreCorrupted, StoreError: the store read failed.
        """
        mine = self.completions.get(agent_id)
        if mine is not None:
            found = mine.get(generation)
            if found is not None:
                return found
        return self.known(agent_id).get(generation)

    def has_completion(self, record: AgentRecord) -> bool:
        """Return whether ``record``'s current generation has its completion (made once).

        Only a generation its record says ended can have one: the commit that
        stores a completion stamps the record with its generation's end
        (``AgentRecord.ended``), so a generation that has not ended reads
        nothing from the store.

        Raises:
            StoreCorrupted, StoreError: the store read failed.
        """
        generation = record.generation
        mine = self.completions.get(record.id)
        if mine is not None and generation in mine:
            return True
        ended = record.ended
        if ended is None or ended.generation != generation:
            return False
        return self.completion(record.id, generation) is not None

    def _read_stored(
        self, agent_id: str, mine: dict[int, CompletionRecord] | None
    ) -> dict[int, CompletionRecord]:
        """Add the stored completions of ``agent_id`` memory lacks; return them all.

        Journaled as any change: a command that fails forgets what it read
        (memory is exactly as the command found it; a later ask reads again).
        """
        assert self.stored is not None
        found = self.stored.of_agent(agent_id)
        if mine is None:  # nothing of the agent's in memory: the read is all it holds
            mine = self.completions[agent_id] = JDict(
                self._journal, _by_generation(found), ordered=True
            )
            self._cache(agent_id)
            return mine
        for record in found:
            generation = record.completion.generation
            if generation not in mine:
                mine[generation] = record
        self.shares.partial.discard(agent_id)
        return mine

    def _cache(self, agent_id: str) -> None:
        """Hold ``agent_id``'s completions as read; forget the oldest read beyond the bound
        (read again if asked for: none was written this run, so the store has them)."""
        cache = self.shares.read_only
        cache[agent_id] = None
        while len(cache) > READ_CACHE:
            oldest = next(iter(cache))
            del cache[oldest]
            del self.completions[oldest]

    def _written(self, agent_id: str) -> None:
        """``agent_id``'s completions change: memory holds them for the rest of the run."""
        read_only = self.shares.read_only
        if agent_id in read_only:
            del read_only[agent_id]

    def _queue(self, key: str) -> dict[str, CompletionRecord]:
        """Return the pending queue of recipient ``key``, made if it has none."""
        queue = self.pending.get(key)
        if queue is None:
            queue = self.pending[key] = JDict(self._journal, ordered=True)
        return queue

    def _known(self, agent_id: str, generation: int) -> dict[int, CompletionRecord]:
        """Return the completions of ``agent_id`` memory holds, made if it has none; one
        made for a ``generation`` past the first is partial (the store may hold the
        earlier ones)."""
        completions = self.completions
        known = _get(completions, agent_id)
        if known is None:
            journal = self._journal
            known = JDict(journal, ordered=True)
            if journal.active:  # the journaled dict's own set, inline (every new agent's)
                journal.log((_restore_item, (completions, agent_id, _MISSING)))
            _new(completions, agent_id, known)  # absent (see _get): no slot wrapper's tuple
            if self.stored is not None and generation > 1:
                self.shares.partial.add(agent_id)
        return known

    def add_completion(self, record: CompletionRecord, *, persist: bool = True) -> None:
        """Store a completion and, while undelivered, queue it for its recipient."""
        # Each journaled dict's set inline (its old value logged, then the dict's own set,
        # as JDict.__setitem__ does): every settle comes through here.
        journal = self._journal
        active = journal.active
        completion = record.completion
        agent_id, generation = completion.agent_id, completion.generation
        known = _get(self.completions, agent_id)  # _known's look, in C
        if known is None:  # made here (journaled): undoing that drops the set below with it
            _new(self._known(agent_id, generation), generation, record)
        else:
            if active:
                journal.log((_restore_item, (known, generation, _get(known, generation, _MISSING))))
            if _new(known, generation, record) is not record:  # a generation's completion again
                _set(known, generation, record)
        if not record.delivered:
            recipient_id = record.recipient_id
            key = HOST_KEY if recipient_id is None else recipient_id  # recipient_key, inline
            queue = self.pending.get(key)  # _queue's look, in C: the host's is always there
            if queue is None:
                queue = self._queue(key)
            if active:
                journal.log(
                    (_restore_item, (queue, completion.id, _get(queue, completion.id, _MISSING)))
                )
            _set(queue, completion.id, record)
            undelivered = self.undelivered
            count = _get(undelivered, agent_id, _MISSING)
            if active:
                journal.log((_restore_item, (undelivered, agent_id, count)))
            _set(undelivered, agent_id, (0 if count is _MISSING else count) + 1)
        if persist:  # one stored delivered at once was never in the undelivered index
            self._write_completion(record, index=not record.delivered)

    def _write_completion(self, record: CompletionRecord, *, index: bool = False) -> None:
        """Gather the write of ``record``; ``index``: its delivery changed, so is its key
        in the ``undelivered`` index (added or deleted)."""
        completion = record.completion
        agent_id = completion.agent_id
        if agent_id in self.shares.read_only:  # _written's check, in C (nearly never: no call)
            self._written(agent_id)
        key = completion_key(agent_id, completion.generation)
        # JList.append's work inline (every settle comes through here, once or twice).
        writes, journal = self.writes, self._journal
        if journal.active:
            journal.log((list.pop, (writes,)))
        list.append(writes, ("completions", key, _encode(record)))
        if index:
            if journal.active:
                journal.log((list.pop, (writes,)))
            list.append(writes, ("undelivered", key, None if record.delivered else b""))

    def _unqueue(self, record: CompletionRecord) -> None:
        """Take a completion off its recipient's queue; an emptied queue goes too."""
        recipient_id = record.recipient_id
        key = HOST_KEY if recipient_id is None else recipient_id  # recipient_key, inline
        queued = self.pending.get(key)
        if queued is not None:
            queued.pop(record.completion.id, None)
            if not queued and key != HOST_KEY:
                del self.pending[key]

    def mark_delivered(self, record: CompletionRecord) -> CompletionRecord:
        """Mark a pending completion received by its recipient."""
        completion = record.completion
        agent_id = completion.agent_id
        self._unqueue(record)
        # The journaled dicts' sets inline, as in add_completion.
        journal = self._journal
        undelivered = self.undelivered
        count = undelivered[agent_id]
        if journal.active:
            journal.log((_restore_item, (undelivered, agent_id, count)))
        _set(undelivered, agent_id, count - 1)
        recipient = None if record.recipient_id is None else self.agents.get(record.recipient_id)
        generation = 0 if recipient is None else recipient.generation
        done = msgspec.structs.replace(record, delivered=True, delivered_generation=generation)
        known = self.completions[agent_id]
        if journal.active:
            journal.log(
                (
                    _restore_item,
                    (known, completion.generation, _get(known, completion.generation, _MISSING)),
                )
            )
        _set(known, completion.generation, done)
        self._write_completion(done, index=True)
        return done

    def undeliver(self, record: CompletionRecord) -> CompletionRecord:
        """Put a delivered completion back in its recipient's pending queue.

        The arrival sequence passes its number (an open did not see the
        delivered ones), so what arrives later sorts after it, as before.
        """
        completion = record.completion
        if record.seq > self.seq:
            self.seq = record.seq
        back = msgspec.structs.replace(record, delivered=False, delivered_generation=0)
        self._queue(recipient_key(record.recipient_id))[completion.id] = back
        self.undelivered[completion.agent_id] = self.undelivered.get(completion.agent_id, 0) + 1
        self._known(completion.agent_id, completion.generation)[completion.generation] = back
        self._write_completion(back, index=True)
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
        key = HOST_KEY if recipient_id is None else recipient_id  # recipient_key, inline
        return list(self.pending.get(key, {}).values())

    def remove_completion(self, agent_id: str, generation: int) -> None:
        """Delete one stored delivered completion of an agent (its completions read first).

        Raises:
            StoreCorrupted, StoreError: the store read failed.
        """
        self.known(agent_id)
        self._written(agent_id)
        del self.completions[agent_id][generation]
        self.writes.append(("completions", completion_key(agent_id, generation), None))

    def _untag_delivered(self, done: Completion, generation: int) -> None:
        """Drop the receiving turn ``generation``'s tag from a delivered completion."""
        record = self.completion(done.agent_id, done.generation)
        if record is not None and record.delivered_generation == generation:
            record = msgspec.structs.replace(record, delivered_generation=0)
            self.completions[done.agent_id][done.generation] = record
            self._write_completion(record)
